#!/usr/bin/env bash
# Builds and checks the CUDA/NCCL replay path on a GPU machine with a PyTorch wheel (no
# internet, no apt needed). Writes everything it measures to $OUT (default ./gpu-out).
#
#   PATH=/opt/torch/.venv/bin:$PATH bash scripts/gpu_check.sh
#
# Needs: python3 with torch (CUDA), cmake, ninja, a C++23 compiler, nvcc under /usr/local/cuda,
# and the headers of nlohmann-json, fmt, CLI11, Boost, GoogleTest and zlib: either installed,
# or as Debian packages in GPU_DEBS=DIR, fetched beforehand on a Debian machine with
#   bash scripts/gpu_check.sh --fetch-debs DIR
# and unpacked by this script into a private prefix (nothing is installed on the GPU machine).
# Configures a separate build directory (build-gpu) without the GUI, sweeps and benchmarks.
#
# Steps (GPU_CHECK_STEPS="..." runs those named, in the order named; default all, in this order):
#   tests     backend_test's CUDA tests, the CUDA gradient check of a small plan
#   bench-ops every op of tests/data/costmodel/h200_replay_plans/llama8b_l4_mb4.json and
#             examples/gpu_gpt_1dev.json alone vs in the replay vs predicted, per op class (the
#             replay's 15 % target)
#   (the compute-bound plans: tests/data/costmodel/h200_replay_plans, Llama-3-8B and GPT-13B
#   layer shapes on one GPU, which the per-op-class tests also read; they say "kernel_style":
#   "eager", the style of the kernels the replay calls, so the predictions compare like with like)
#   compute   replay (eager, and as a CUDA graph) vs simulate on the compute-bound plans
#   loop      validate --profile-from on the compute-bound plans and on bench/gpu/plans
# GPU_BENCH_OPS_PLANS="a.json b.json" replaces the bench-ops plans; GPU_CHECK_ONLY_LOOP=1 is
# GPU_CHECK_STEPS=loop. GPU_DEADLINE_S=N: each step gets only what is left of N seconds from the
# start (default: no deadline). GPU_ARCHIVE=FILE.tar.gz: after every step, $OUT is packed into
# FILE (for machines that hand back only a few files).
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
if [ "${1:-}" = "--fetch-debs" ]; then
  # The header packages the build needs, with the one runtime library among them (fmt), as
  # this Debian release names them; for a GPU machine that has no apt or no network.
  dir=${2:?usage: gpu_check.sh --fetch-debs DIR}
  mkdir -p "$dir" && cd "$dir" || exit 2
  fmt_lib=$(apt-cache depends libfmt-dev | awk '/Depends: libfmt[0-9]/ {print $2; exit}')
  boost_dev=$(apt-cache depends libboost-dev | awk '/Depends: libboost[0-9.]*-dev/ {print $2; exit}')
  exec apt-get download nlohmann-json3-dev libfmt-dev "$fmt_lib" libcli11-dev "$boost_dev" \
    libgtest-dev libgmock-dev zlib1g-dev zlib1g
fi
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/gpu_check.log") 2>&1
started=$(date +%s)
left() {  # seconds left before GPU_DEADLINE_S (a large number without one)
  [ -n "${GPU_DEADLINE_S:-}" ] && echo $((GPU_DEADLINE_S - ($(date +%s) - started))) || echo 86400
}
archive() { [ -n "${GPU_ARCHIVE:-}" ] && tar -C "$OUT" -czf "$GPU_ARCHIVE" . 2> /dev/null; true; }
step() { archive; echo; echo "=== $* (at $(($(date +%s) - started)) s)"; }
# within SECONDS CMD...: runs CMD with at most SECONDS and what is left of the deadline.
within() {
  local want=$1 l; shift; l=$(left)
  [ "$l" -lt 10 ] && { echo "skipped (deadline): $*"; return 124; }
  timeout $(( want < l ? want : l )) "$@"
}
status=0
steps=${GPU_CHECK_STEPS:-tests bench-ops compute loop}
[ "${GPU_CHECK_ONLY_LOOP:-0}" = 1 ] && steps=loop
wants() { [[ " $steps " == *" $1 "* ]]; }

step "environment"
date -u
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 && head -15 "$OUT/nvidia-smi.txt"
${CXX:-c++} --version | head -1; cmake --version | head -1; nproc
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
PREFIX_PATH=$TORCH_PREFIX
if [ -n "${GPU_DEBS:-}" ]; then
  # Unpacked, not installed: a private prefix the configure step searches first.
  deps=${GPU_DEBS_PREFIX:-/tmp/stretto-gpu-deps}
  mkdir -p "$deps"
  for f in "$GPU_DEBS"/*.deb; do dpkg -x "$f" "$deps" || { echo "cannot unpack $f"; exit 2; }; done
  # A library link that points to an absolute path (zlib's libz.so) points into the prefix.
  find "$deps" -xtype l | while read -r l; do
    t=$(readlink "$l"); [[ $t == /* && -e $deps$t ]] && ln -sf "$deps$t" "$l"
  done
  PREFIX_PATH="$TORCH_PREFIX;$deps/usr"
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "header packages unpacked from $GPU_DEBS into $deps: $(ls "$GPU_DEBS" | tr '\n' ' ')"
fi

step "configure (build-gpu)"
export CUDACXX=/usr/local/cuda/bin/nvcc CUDA_HOME=/usr/local/cuda
cmake -S . -B build-gpu "${GPU_CMAKE_OPTIONS[@]}" -DCMAKE_PREFIX_PATH="$PREFIX_PATH" \
  ${NCCL_INC:+-DCMAKE_CXX_FLAGS=-isystem$NCCL_INC} \
  > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; echo "configure failed"; archive; exit 1; }
tail -5 "$OUT/configure.log"
grep -q "STRETTO_BACKEND_CUDA" build-gpu/build.ninja && echo "CUDA/NCCL path: compiled in" \
  || { echo "CUDA/NCCL path: NOT compiled in (no torch_cuda target)"; status=1; }

step "build stretto$(wants tests && echo ' and backend_test')"
cmake --build build-gpu -j"$(nproc)" --target stretto $(wants tests && echo backend_test) -- -k 0 \
  > "$OUT/build.log" 2>&1 || { grep -m5 -B2 -A12 "error" "$OUT/build.log"; tail -20 "$OUT/build.log"; }
[ -x build-gpu/stretto ] || { echo "build failed"; archive; exit 1; }
echo "built in $(($(date +%s) - started)) s since the start"

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# The compute-bound plans, the one the loop profiles first.
COMPUTE_PLANS=(tests/data/costmodel/h200_replay_plans/llama8b_l4_mb4.json)
for p in tests/data/costmodel/h200_replay_plans/*.json; do [ "$p" = "${COMPUTE_PLANS[0]}" ] || COMPUTE_PLANS+=("$p"); done

step_tests() {
step "GPU tests (backend_test: the CUDA tests; the Gloo tests too when the wheel has Gloo)"
within 240 build-gpu/tests/backend_test --gtest_filter='Replay.Cuda*:Replay.Refuses*:Replay.Expected*:BenchOps.Cuda*:ReplayKernels.*' \
  > "$OUT/backend_test_gpu.txt" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ *(OK|FAILED|SKIPPED) \]|tests ran" "$OUT/backend_test_gpu.txt" | tail -25

step "replay on one GPU: gradient check (fp32, small)"
within 120 build-gpu/stretto replay tests/data/backend/gpu_1dev.json --device cuda --check --format table \
  > "$OUT/replay_gpu_check.txt" 2>&1 || status=1
tail -12 "$OUT/replay_gpu_check.txt"
}

step_bench_ops() {
step "per op on one GPU: replay vs isolated vs CUDA graph vs predicted (bench-ops)"
# Every distinct op of each plan timed alone on the replay's code (eager, and captured once as a
# CUDA graph and replayed: launch overhead removed), next to the replay's time for it and the
# cost model's prediction (docs/validation.md, bench-ops). The summary flags every op class
# whose replay is more than 15 % over its isolated time (the target of the replay's hot path).
for plan in ${GPU_BENCH_OPS_PLANS:-${COMPUTE_PLANS[0]} examples/gpu_gpt_1dev.json}; do
  name=$(basename "$plan" .json)
  out="$OUT/bench_ops_$name"
  within 150 build-gpu/stretto bench-ops "$plan" --device cuda --cuda-graphs \
    --iterations 20 --warmup 5 --replay-iterations 6 --format json > "$out.json" \
    2> "$out.err" || { status=1; tail -5 "$out.err"; continue; }
  python3 - "$out.json" <<'PY' | tee "$out.txt" || status=1
import json, sys
b = json.load(open(sys.argv[1]))
ms = lambda v: "-" if v is None else f"{v / 1e6:.3f}"
print(f"{b['plan']}: {b['device']} {b['dtype']}, kernels {b['kernels']}, ms per op "
      f"(replay / alone / graph / predicted)")
by_class = {}
for o in b["ops"]:
    cols = []
    for d in ("forward", "backward"):
        g = o["graph"][d]["median_ns"] if o["graph"] else None
        cols.append(f"{ms(o['replay'][d + '_ns'])} / {ms(o['isolated'][d]['median_ns'])} / "
                    f"{ms(g)} / {ms(o['predicted'][d + '_ns'])}")
        r, i, p = o["replay"][d + "_ns"], o["isolated"][d]["median_ns"], o["predicted"][d + "_ns"]
        if r is not None and i:
            c = by_class.setdefault((o["kind"], d), [0, 0, 0, 0])
            c[0] += r * o["instances"]
            c[1] += i * o["instances"]
            c[2] += (i if g is None else g) * o["instances"]
            c[3] += (p or 0) * o["instances"]
    print(f"{o['kind']:<15} x{o['instances']:<3} F {cols[0]:<34} B {cols[1]:<34}"
          + ("" if o.get("backward_kernel", True) else "  B: no kernel (passes the gradient through)")
          + (f"  graph: {o['graph_error']}" if o["graph_error"] else ""))
print("per op class, summed over instances: replay/alone, graph/alone, predicted/alone"
      " (replay target: within 15 % of alone)")
tot = [0, 0, 0, 0]
for (k, d), c in sorted(by_class.items()):
    tot = [a + b for a, b in zip(tot, c)]
    print(f"  {k:<15} {d:<8} alone {c[1] / 1e6:8.3f} ms  replay {c[0] / c[1]:5.2f}x  graph "
          f"{c[2] / c[1]:5.2f}x  predicted {c[3] / c[1]:5.2f}x" + ("  OVER" if c[0] > 1.15 * c[1] else ""))
print(f"  all ops: alone {tot[1] / 1e6:.3f} ms, replay {tot[0] / 1e6:.3f} ms, predicted {tot[3] / 1e6:.3f} ms")
PY
done
}

step_compute() {
step "compute-bound plans: replay (eager and CUDA graph) vs simulate"
for plan in "${COMPUTE_PLANS[@]}"; do
  name=$(basename "$plan" .json)
  build-gpu/stretto simulate "$plan" --format json > "$OUT/simulate_$name.json" || status=1
  within 120 build-gpu/stretto replay "$plan" --device cuda --iterations 8 --warmup 3 \
    --format json > "$OUT/replay_$name.json" 2> "$OUT/replay_$name.err" \
    || { status=1; tail -4 "$OUT/replay_$name.err"; }
  within 120 build-gpu/stretto replay "$plan" --device cuda --iterations 8 --warmup 3 --cuda-graphs \
    --format json > "$OUT/replay_graph_$name.json" 2> "$OUT/replay_graph_$name.err" \
    || { status=1; tail -4 "$OUT/replay_graph_$name.err"; }
  python3 - "$OUT/simulate_$name.json" "$OUT/replay_$name.json" "$OUT/replay_graph_$name.json" <<'PY' || status=1
import json, sys
def load(p):
    try: return json.load(open(p))
    except Exception as e: return None
s, r, g = (load(p) for p in sys.argv[1:4])
name = sys.argv[1].rsplit("/", 1)[-1][len("simulate_"):-len(".json")]
line = f"{name:<20} predicted {s['step_time_ms']:.1f} ms" if s else f"{name}: simulate failed"
for tag, m in (("replay", r), ("graph", g)):
    if m: line += (f"; {tag} {m['step_time_ms']:.1f} (std {m['step_time_std_ms']:.1f})"
                   f" error {100 * (s['step_time_ms'] - m['step_time_ms']) / m['step_time_ms']:+.1f} %")
    else: line += f"; {tag}: failed"
print(line)
PY
done
}

step_loop() {
step "close the loop on one GPU: the compute-bound plans, profiled from one of them"
within 200 build-gpu/stretto validate "${COMPUTE_PLANS[@]:1}" --profile-from "${COMPUTE_PLANS[0]}" \
  --save-profile "$OUT/gpu_profile_compute.json" --device cuda --iterations 6 --warmup 2 --rounds 2 \
  --format json > "$OUT/gpu_validate_compute.json" 2> "$OUT/gpu_validate_compute.err" || status=1
step "close the loop on one GPU: profile one plan, validate five others with its table"
# bench/gpu/plans: the same layer shapes as the profiled plan, other microbatch counts, depth
# and recompute modes; none of them was profiled. --profile-from measures the table in the same
# session, interleaved round by round with the validated plans, so a drift of the machine's
# speed between a profile and a later validation does not count as model error.
within 240 build-gpu/stretto validate bench/gpu/plans/*.json --profile-from examples/gpu_gpt_1dev.json \
  --save-profile "$OUT/gpu_profile.json" --device cuda --iterations ${GPU_ITERATIONS:-15} \
  --warmup 3 --rounds 2 --format json > "$OUT/gpu_validate.json" 2> "$OUT/gpu_validate.err" \
  || status=1
for v in "$OUT/gpu_validate_compute.json" "$OUT/gpu_validate.json"; do
python3 - "$v" <<'PY' || status=1
import json, sys
v = json.load(open(sys.argv[1]))
print(sys.argv[1].rsplit("/", 1)[-1])
for p in v["plans"]:
    print(f"{p['plan']:<50} predicted {p['predicted_step_ms']:9.3f}  measured {p['measured_step_ms']:9.3f}"
          f" (std {p['measured_step_std_ms']:7.3f}, {p['measured_steps']} steps, tail"
          f" {p['measured_tail_ms']:6.3f})  error {p['step_err_pct']:+6.1f}%"
          f"  noise ±{p.get('noise_pct', float('nan')):.1f}%")
print({k: v[k] for k in v if k != "plans"})
PY
done
}

for st in $steps; do
  case $st in
    tests) step_tests ;; bench-ops) step_bench_ops ;; compute) step_compute ;; loop) step_loop ;;
    *) echo "unknown step: $st (tests, bench-ops, compute, loop)"; status=2 ;;
  esac
done

step "done (status $status) in $(($(date +%s) - started)) s; outputs in $OUT"
ls -la "$OUT"
archive
exit $status
