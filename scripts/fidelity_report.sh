#!/usr/bin/env bash
# CPU fidelity report: `stretto profile` on the profile_* plans of bench/fidelity/plans, then
# `stretto validate` of every validate_* plan with that table (other schedules, microbatch
# counts and placements of the same models). Prints the step-time table (predicted vs measured,
# error, measured spread), the mean and worst |error| and the ranking's Kendall tau, and keeps
# everything under OUT_DIR (profile.json, profile_stats.json, validate.json, validate.txt,
# report.md).
#
# Usage: scripts/fidelity_report.sh [BUILD_DIR=build] [OUT_DIR=out/fidelity]
# Environment: ITERATIONS (measured steps per replay, default 5), WARMUP (default 1),
#   NICE (niceness of the runs, default 0; a negative value, as root, shields the timings from
#   other work on a shared machine: the script then runs in its own session and sets that
#   session's autogroup niceness too, since with sched_autogroup plain nice only orders
#   processes within one session).
# Needs a build with the LibTorch backend (stretto profile / validate) and python3.
set -euo pipefail
if [ "${NICE:-0}" != 0 ] && [ -z "${STRETTO_FIDELITY_SESSION:-}" ]; then
  STRETTO_FIDELITY_SESSION=1 exec setsid -w "$0" "$@"
fi
if [ "${NICE:-0}" != 0 ] && [ -w /proc/self/autogroup ]; then
  echo "${NICE}" > /proc/self/autogroup 2>/dev/null || true
fi
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
out=${2:-out/fidelity}
iters=${ITERATIONS:-5}
warm=${WARMUP:-1}
nice_level=${NICE:-0}
stretto="$build/stretto"
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
plans="$here/bench/fidelity/plans"
run() { nice -n "$nice_level" "$stretto" "$@"; }

echo "fidelity: profiling $(ls "$plans"/profile_*.json | wc -l) plans ..." >&2
# a plan the backend cannot replay is reported (profile.err) and left out
run profile "$plans"/profile_*.json --iterations "$iters" --warmup "$warm" \
  -o "$out/profile.json" --format json > "$out/profile_stats.json" 2> "$out/profile.err" || true
test -s "$out/profile.json" || { cat "$out/profile.err" >&2; exit 1; }
echo "fidelity: validating $(ls "$plans"/validate_*.json | wc -l) plans ..." >&2
set +e
run validate "$plans"/validate_*.json --profile "$out/profile.json" --iterations "$iters" \
  --warmup "$warm" --format json > "$out/validate.json" 2> "$out/validate.err"
rc=$?
set -e
python3 - "$out" "$rc" <<'PY'
import json, os, sys
out, rc = sys.argv[1], int(sys.argv[2])
d = json.load(open(os.path.join(out, "validate.json")))
lines = ["| plan | predicted ms | measured ms (mean ± std) | error | measured after last op ms |",
         "|---|---:|---:|---:|---:|"]
for p in d["plans"]:
    name = os.path.basename(p["plan"]).replace(".json", "").replace("validate_", "")
    lines.append(f"| {name} | {p['predicted_step_ms']:.1f} | {p['measured_step_ms']:.1f} ± "
                 f"{p['measured_step_std_ms']:.1f} | {p['step_err_pct']:+.1f}% | "
                 f"{p.get('measured_tail_ms', 0):.1f} |")
summary = (f"{len(d['plans'])} plans validated: mean |error| {d.get('mean_abs_step_err_pct', 0):.1f}%, "
           f"worst {d.get('worst_abs_step_err_pct', 0):.1f}%, ranking Kendall tau "
           f"{d.get('kendall_tau', float('nan')):.3f} (predicted best: "
           f"{os.path.basename(d.get('predicted_best', '-'))}, measured best: "
           f"{os.path.basename(d.get('measured_best', '-'))})")
err = open(os.path.join(out, "validate.err")).read() + open(os.path.join(out, "profile.err")).read()
failed = sorted({l.split(": error:")[0] for l in err.splitlines() if ": error: replay failed" in l})
text = "\n".join(lines) + "\n\n" + summary + "\n"
if failed:
    text += ("\nnot replayed (the backend failed; its messages are in profile.err, validate.err):\n"
             + "\n".join("  " + os.path.basename(l) for l in failed) + "\n")
open(os.path.join(out, "report.md"), "w").write(text)
print(text)
PY
