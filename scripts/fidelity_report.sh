#!/usr/bin/env bash
# CPU fidelity report: the profile_* plans of bench/fidelity/plans are measured into a profiled
# cost table, and every validate_* plan (other schedules, microbatch counts and placements of
# the same models) is predicted with that table only and replayed. Both happen in one
# `stretto validate --profile-from` session, interleaved over ROUNDS rounds (order reversed
# every other round), so a drift of the host's speed touches the table and the validated plans
# alike. Prints the step-time table (predicted vs measured, error, measured spread), the mean
# and worst |error| and the ranking's Kendall tau, and keeps everything under OUT_DIR
# (profile.json, validate.json, validate.err, report.md).
#
# Usage: scripts/fidelity_report.sh [BUILD_DIR=build] [OUT_DIR=out/fidelity]
# Environment: ITERATIONS (measured steps per replay, default 6), ROUNDS (replays of every plan,
#   default 8: each plan's measurement pools ROUNDS x ITERATIONS steps), WARMUP (default 1),
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
iters=${ITERATIONS:-6}
rounds=${ROUNDS:-8}
warm=${WARMUP:-1}
nice_level=${NICE:-0}
stretto="$build/stretto"
mkdir -p "$out"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
plans="$here/bench/fidelity/plans"
run() { nice -n "$nice_level" "$stretto" "$@"; }

echo "fidelity: profiling $(ls "$plans"/profile_*.json | wc -l) plans and validating $(ls "$plans"/validate_*.json | wc -l), interleaved over $rounds rounds ..." >&2
# One session: every round replays the profile_* plans (their ops make the table) and the
# validate_* plans (predicted with that table only), the order reversed every other round, so
# the host's speed drifts touch the table and the validated plans alike. A plan the backend
# cannot replay is reported (validate.err) and left out.
set +e
run validate "$plans"/validate_*.json --profile-from "$plans"/profile_*.json \
  --save-profile "$out/profile.json" --rounds "$rounds" --iterations "$iters" --warmup "$warm" \
  --format json > "$out/validate.json" 2> "$out/validate.err"
rc=$?
set -e
test -s "$out/profile.json" || { cat "$out/validate.err" >&2; exit 1; }
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
           f"{os.path.basename(d.get('measured_best', '-'))})\n")
rev = d.get("ranking_reversals", [])
if rev:
    summary += (f"{len(rev)} pair(s) ranked the other way round, "
                f"{d.get('ranking_reversals_resolved', 0)} of them measured apart by more than twice "
                "the standard error of their difference:\n")
    for r in rev:
        summary += (f"  {os.path.basename(r['faster'])} measured faster than "
                    f"{os.path.basename(r['slower'])} by {r['measured_diff_ms']:.1f} ms "
                    f"(se {r['measured_diff_se_ms']:.1f} ms{'' if r['resolved'] else ', within the noise'})\n")
opts = json.load(open(os.path.join(out, "profile.json"))).get("options", {})
summary += "profiled options: " + json.dumps(opts, sort_keys=True) + "\n"
err = open(os.path.join(out, "validate.err")).read()
failed = sorted({l.split(": error:")[0] for l in err.splitlines() if ": error: replay failed" in l})
text = "\n".join(lines) + "\n\n" + summary
if failed:
    text += ("\nnot replayed (the backend failed; its messages are in validate.err):\n"
             + "\n".join("  " + os.path.basename(l) for l in failed) + "\n")
open(os.path.join(out, "report.md"), "w").write(text)
print(text)
PY
