#!/usr/bin/env bash
# Writes what the engine's results show through the CLI into OUTDIR, so that two builds can be
# compared byte for byte (`diff -r A B`): an engine change that must not move any result is
# checked by running this before and after it.
#   bench/engine_outputs.sh build/stretto OUTDIR
# Each example and builder example: `simulate --format json --critical-path=full` at op
# granularity, at pass granularity, folded; a Chrome trace (every op's start and end) at op
# granularity. The wall time and the plan's path are left out. DualPipeV references (bench/plans.h's reference_plan) of growing size: json,
# op and pass granularity, folded and not.
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
here=$(cd "$(dirname "$0")/.." && pwd)
run() {  # name, plan, extra options...
  local name=$1 plan=$2
  shift 2
  "$bin" simulate "$plan" --format json "$@" >"$out/$name.json" 2>"$out/$name.err" ||
    echo "exit $?" >>"$out/$name.err"
  # not results: the wall time, and the plan's path (the references' plans are written in $out)
  sed -i '/^  "sim_wall_ms": /d; /^  "plan": /d' "$out/$name.json"
}
for f in "$here"/examples/*.json "$here"/examples/builders/*.json; do
  n=$(basename "$(dirname "$f")")_$(basename "$f" .json)
  run "$n.op" "$f" --critical-path=full
  run "$n.pass" "$f" --critical-path=full --granularity pass
  run "$n.fold" "$f" --critical-path=full --fold-replicas
  "$bin" simulate "$f" --format json --trace "$out/$n.trace.json" >/dev/null 2>&1 || true
done
ref() {  # pp dp microbatches: the reference plan (bench/plans.h reference_plan, 2 layers/stage)
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
pp, dp, mbs = map(int, sys.argv[1:4])
stages = 2 * pp
model = {"family": "transformer", "layers": stages * 2, "hidden": 4096, "heads": 32,
         "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128000, "seq_len": 4096,
         "microbatch_size": 1, "pp_regions": stages,
         "moe": {"experts": 64, "top_k": 6, "expert_ffn_hidden": 2048, "shared_experts": 1}}
base = []
for s in range(stages):
    r = s if s < pp else stages - 1 - s
    devs = [r * dp + k for k in range(dp)]
    base.append({"op": "place", "filter": {"PP": s}, "devices": devs, "stream": "pp"})
    base.append({"op": "replicate", "filter": {"PP": s}, "devices": devs,
                 "reduce_stream": "dp", "shard_optimizer": True})
    base.append({"op": "shard", "filter": {"PP": s, "EP": "*"}, "devices": devs, "stream": "ep"})
print(json.dumps({"model": model,
                  "cluster": {"preset": "h100-sxm", "nodes": (pp * dp + 7) // 8,
                              "devices_per_node": 8},
                  "costmodel": {"kind": "analytic"},
                  "schedule": {"builder": "dualpipev", "ranks": pp, "stages_per_rank": 2,
                               "microbatches": mbs, "base": base}}))
PY
}
for size in "4 8 16" "8 8 32" "16 4 64" "16 64 256"; do
  set -- $size
  n=ref_$1x$2x$3
  ref "$@" >"$out/$n.plan.json"
  run "$n.fold" "$out/$n.plan.json" --fold-replicas
  if [ "$2" -le 8 ]; then
    run "$n.op" "$out/$n.plan.json" --critical-path=full
    run "$n.pass" "$out/$n.plan.json" --granularity pass
  fi
done
