#!/usr/bin/env bash
# Builds and checks the CUDA/NCCL replay path on a GPU machine with a PyTorch wheel (no
# internet, no apt needed). Writes everything it measures to $OUT (default ./gpu-out).
#
#   PATH=/opt/torch/.venv/bin:$PATH bash scripts/gpu_check.sh
#
# Needs: python3 with torch (CUDA), cmake, ninja, a C++23 compiler, nvcc under /usr/local/cuda,
# and the system headers of nlohmann-json, fmt, CLI11, Boost and GoogleTest. Configures a
# separate build directory (build-gpu) without the GUI, sweeps and benchmarks.
# GPU_BENCH_OPS_PLANS="a.json b.json" adds plans to the per-op comparison (bench-ops).
# GPU_CHECK_ONLY_LOOP=1 builds stretto alone and runs only the last step (profile + validate).
#
#   bash scripts/gpu_check.sh --configure-only DIR
# only configures DIR (emptied first) with the same CMake options, on any machine: CI runs it
# (ctest: gpu_check_configures), so an option set that no longer configures fails there, not
# on a lent GPU. Without a GPU the CUDA options are unused (CMake says so) and LibTorch is the
# one CMake finds (TORCH_PREFIX overrides).
set -uo pipefail
cd "$(dirname "$0")/.."

# The GPU build's CMake options: the one list both modes use.
GPU_CMAKE_OPTIONS=(-G Ninja -DCMAKE_BUILD_TYPE=Release
  -DSTRETTO_WITH_GUI=OFF -DSTRETTO_WITH_EXPLORE=OFF -DSTRETTO_BUILD_BENCH=OFF
  -DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
  -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0)

if [ "${1:-}" = "--configure-only" ]; then
  dir=${2:?usage: gpu_check.sh --configure-only DIR}
  rm -rf "$dir"
  exec cmake -S . -B "$dir" "${GPU_CMAKE_OPTIONS[@]}" \
    ${TORCH_PREFIX:+-DCMAKE_PREFIX_PATH=$TORCH_PREFIX} > /dev/null
fi
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
step() { echo; echo "=== $*"; }
status=0

step "environment"
date -u
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 && head -15 "$OUT/nvidia-smi.txt"
python3 - <<'PY' | tee "$OUT/torch.txt"
import torch, os
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count(), "cxx11 abi", torch.compiled_with_cxx11_abi())
inc = os.path.join(os.path.dirname(torch.__file__), "include")
print("gloo headers in the wheel:", os.path.isdir(os.path.join(inc, "gloo")))
PY
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# ProcessGroupNCCL.hpp includes <nccl.h>: take the wheel's NCCL (nvidia-nccl) headers, which
# match the library torch loads; fall back to the system's.
NCCL_INC=$(python3 -c 'import nvidia.nccl, os; d = os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0]; print(os.path.join(d, "include"))' 2>/dev/null || true)
[ -f "$NCCL_INC/nccl.h" ] || NCCL_INC=""
echo "torch cmake prefix: $TORCH_PREFIX"
echo "nccl.h from: ${NCCL_INC:-system}"

step "configure (build-gpu)"
export CUDACXX=/usr/local/cuda/bin/nvcc CUDA_HOME=/usr/local/cuda
cmake -S . -B build-gpu "${GPU_CMAKE_OPTIONS[@]}" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
  ${NCCL_INC:+-DCMAKE_CXX_FLAGS=-isystem$NCCL_INC} \
  2>&1 | tee "$OUT/configure.log" | tail -25
grep -q "STRETTO_BACKEND_CUDA" build-gpu/build.ninja && echo "CUDA/NCCL path: compiled in" \
  || { echo "CUDA/NCCL path: NOT compiled in (no torch_cuda target)"; status=1; }

step "build stretto and backend_test"
cmake --build build-gpu -j16 --target stretto $([ "${GPU_CHECK_ONLY_LOOP:-0}" = 1 ] || echo backend_test) 2>&1 | tee "$OUT/build.log" | tail -30
[ -x build-gpu/stretto ] || { echo "build failed"; exit 1; }

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
if [ "${GPU_CHECK_ONLY_LOOP:-0}" != 1 ]; then
step "GPU tests (backend_test: CUDA one-GPU check; the Gloo tests too when the wheel has Gloo)"
build-gpu/tests/backend_test --gtest_filter='Replay.CudaOneGpu:Replay.CudaBf16*:Replay.CudaGraphs*:Replay.Refuses*:Replay.Expected*:BenchOps.CudaGraphsOneGpu:ReplayKernels.*' \
  2>&1 | tee "$OUT/backend_test_gpu.txt" | tail -15 || status=1
build-gpu/tests/backend_test --gtest_filter='Schedules/GradientCheck.*:ReplayStep.*' --gtest_brief=1 \
  > "$OUT/backend_test_gloo.txt" 2>&1 && echo "Gloo tests: passed" \
  || echo "Gloo tests: did not pass here (see backend_test_gloo.txt; expected when the wheel has no Gloo headers)"

step "replay on one GPU: gradient check (fp32, small)"
build-gpu/stretto replay tests/data/backend/gpu_1dev.json --device cuda --check --format table \
  2>&1 | tee "$OUT/replay_gpu_check.txt" || status=1

step "replay on one GPU: measured vs predicted (examples/gpu_gpt_1dev.json, bf16)"
build-gpu/stretto replay examples/gpu_gpt_1dev.json --device cuda --iterations 10 --warmup 3 \
  --trace "$OUT/replay_gpu.trace.json" --format table 2>&1 | tee "$OUT/replay_gpu.txt" || status=1
build-gpu/stretto replay examples/gpu_gpt_1dev.json --device cuda --iterations 10 --warmup 3 \
  --format json > "$OUT/replay_gpu.json" 2> "$OUT/replay_gpu.err" || status=1
# The same replay on the reference formulas: the step the fused hot path saves.
build-gpu/stretto replay examples/gpu_gpt_1dev.json --device cuda --iterations 10 --warmup 3 \
  --kernels reference --format json > "$OUT/replay_gpu_reference.json" \
  2> "$OUT/replay_gpu_reference.err" || status=1
python3 - "$OUT/replay_gpu.json" "$OUT/replay_gpu_reference.json" <<'PY' || status=1
import json, sys
f, r = (json.load(open(p)) for p in sys.argv[1:3])
print(f"step: fused {f['step_time_ms']:.3f} ms (std {f['step_time_std_ms']:.3f}), reference {r['step_time_ms']:.3f} ms (std {r['step_time_std_ms']:.3f})")
PY
build-gpu/stretto simulate examples/gpu_gpt_1dev.json --format json > "$OUT/simulate_gpu.json" || status=1

step "per op on one GPU: replay vs isolated vs CUDA graph vs predicted (bench-ops)"
# Every distinct op of each plan timed alone on the replay's code (eager, and captured once as a
# CUDA graph and replayed: launch overhead removed), next to the replay's time for it and the
# cost model's prediction (docs/validation.md, bench-ops), for the fused kernels (the default)
# and the reference formulas. Tables here, JSON in $OUT; the summary flags every op class whose
# replay is more than 15 % over its isolated time (the target of the replay's hot path).
for plan in examples/gpu_gpt_1dev.json ${GPU_BENCH_OPS_PLANS:-}; do
  name=$(basename "$plan" .json)
  for kernels in fused reference; do
    out="$OUT/bench_ops_${name}_$kernels"
    graphs=$([ "$kernels" = fused ] && echo --cuda-graphs)
    build-gpu/stretto bench-ops "$plan" --device cuda --kernels "$kernels" $graphs \
      --iterations 20 --warmup 5 --replay-iterations 10 --format json > "$out.json" \
      2> "$out.err" || status=1
    python3 - "$out.json" <<'PY' | tee "$out.txt" || status=1
import json, sys
b = json.load(open(sys.argv[1]))
ms = lambda v: "-" if v is None else f"{v / 1e6:.3f}"
print(f"{b['plan']}: {b['device']} {b['dtype']}, kernels {b['kernels']}, ms "
      f"(replay / alone / graph / predicted); grads: parameters and inputs with a gradient")
by_class = {}
for o in b["ops"]:
    cols = []
    for d in ("forward", "backward"):
        g = o["graph"][d]["median_ns"] if o["graph"] else None
        cols.append(f"{ms(o['replay'][d + '_ns'])} / {ms(o['isolated'][d]['median_ns'])} / "
                    f"{ms(g)} / {ms(o['predicted'][d + '_ns'])}")
        r, i = o["replay"][d + "_ns"], o["isolated"][d]["median_ns"]
        if r is not None and i:
            c = by_class.setdefault((o["kind"], d), [0, 0])
            c[0] += r * o["instances"]
            c[1] += i * o["instances"]
    print(f"{o['kind']:<15} x{o['instances']:<3} F {cols[0]:<34} B {cols[1]:<34} grads "
          f"{o['params_with_gradient']}/{o['params']} {o['inputs_with_gradient']}/{o['grad_inputs']}"
          + (f"  graph: {o['graph_error']}" if o["graph_error"] else ""))
print("replay / isolated per op class (target: within 15 %):")
for (k, d), (r, i) in sorted(by_class.items()):
    print(f"  {k:<15} {d:<8} {r / i:6.2f}x" + ("  OVER" if r > 1.15 * i else ""))
PY
  done
done

fi  # GPU_CHECK_ONLY_LOOP

step "close the loop on one GPU: profile one plan, validate five others with its table"
# bench/gpu/plans: the same layer shapes as the profiled plan, other microbatch counts, depth
# and recompute modes; none of them was profiled. --profile-from measures the table in the same
# session, interleaved round by round with the validated plans, so a drift of the machine's
# speed between a profile and a later validation does not count as model error.
build-gpu/stretto validate bench/gpu/plans/*.json --profile-from examples/gpu_gpt_1dev.json \
  --save-profile "$OUT/gpu_profile.json" --device cuda --iterations ${GPU_ITERATIONS:-15} \
  --warmup 3 --rounds 2 --format json > "$OUT/gpu_validate.json" 2> "$OUT/gpu_validate.err" \
  || status=1
python3 - "$OUT/gpu_validate.json" <<'PY' || status=1
import json, sys
v = json.load(open(sys.argv[1]))
for p in v["plans"]:
    print(f"{p['plan']:<50} predicted {p['predicted_step_ms']:9.3f}  measured {p['measured_step_ms']:9.3f}"
          f" (std {p['measured_step_std_ms']:7.3f}, {p['measured_steps']} steps, tail"
          f" {p['measured_tail_ms']:6.3f})  error {p['step_err_pct']:+6.1f}%"
          f"  noise ±{p.get('noise_pct', float('nan')):.1f}%")
print({k: v[k] for k in v if k != "plans"})
PY

step "done (status $status); outputs in $OUT"
ls -la "$OUT"
exit $status
