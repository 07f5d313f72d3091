#!/usr/bin/env bash
# Single-node Slurm check of sharded sweeps (issue: sweeps and plan search).
#
# Starts a private Slurm (munged, slurmctld, slurmd from Debian) in a temporary directory with
# its own munge key, socket, ports and state, submits a 4-task `sbatch --array` of
# `stretto sweep SPEC` (each task runs its shard, from SLURM_ARRAY_TASK_ID/COUNT), merges the
# shard databases with `stretto sweep merge`, and checks that the merged results equal an
# unsharded run of the same spec. Touches nothing outside its directory; stops exactly the
# daemons it started.
#
#   scripts/slurm_test.sh [path/to/stretto] [SPEC]
#
# Exit: 0 pass, 1 fail, 77 skipped (the daemons cannot start here: not root, no Slurm, ...).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
stretto=$(readlink -f "${1:-$here/build/stretto}")
spec=$(readlink -f "${2:-$here/tests/data/explore/small.json}")
skip() { echo "SKIP: $*" >&2; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }

[ -x "$stretto" ] || die "no stretto binary at $stretto"
for b in munged slurmctld slurmd sbatch scontrol sinfo python3; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || skip "$b is not installed (scripts/setup.sh installs slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" = 0 ] || skip "a private slurmd must run as root here (it launches jobs as their user)"
export PATH="$PATH:/usr/sbin"

T=$(mktemp -d /tmp/stretto-slurm.XXXXXX)
pids=()
cleanup() {
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munged.pid"; do
    [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  for f in "$T/slurmd.pid" "$T/slurmctld.pid" "$T/munged.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT

# munge with a private key and socket
dd if=/dev/urandom of="$T/munge.key" bs=1024 count=1 status=none
chmod 400 "$T/munge.key"
mkdir -p "$T/munge"; chmod 700 "$T/munge"
munged --force --key-file="$T/munge.key" --socket="$T/munge/munge.sock" \
  --pid-file="$T/munged.pid" --log-file="$T/munged.log" --seed-file="$T/munge.seed" \
  >"$T/munged.out" 2>&1 || skip "munged does not start: $(tail -2 "$T/munged.out" "$T/munged.log" 2>/dev/null)"

host=$(hostname -s)
cpus=$(nproc)
port=$((20000 + RANDOM % 20000))
mkdir -p "$T/state" "$T/spool" "$T/work"
cat >"$T/slurm.conf" <<CONF
ClusterName=stretto-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/munge.sock
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
: >"$T/cgroup.conf"
export SLURM_CONF="$T/slurm.conf"

slurmctld -f "$SLURM_CONF" >"$T/slurmctld.out" 2>&1 || skip "slurmctld does not start: $(tail -3 "$T/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" -N "$host" >"$T/slurmd.out" 2>&1 || skip "slurmd does not start: $(tail -3 "$T/slurmd.log" 2>/dev/null)"
ok=0
for _ in $(seq 1 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -1)
  case "$state" in idle*|mix*|alloc*) ok=1; break ;; esac
  sleep 0.5
done
[ "$ok" = 1 ] || skip "the Slurm node does not come up (state '${state:-none}'): $(tail -3 "$T/slurmd.log" "$T/slurmctld.log" 2>/dev/null)"
echo "slurm up on $host (ports $port/$((port + 1))) in $T" >&2

# The recipe of README "Sweeps on a Slurm cluster": one shard per array task, one database each.
jobid=$(sbatch --parsable --array=0-3 --chdir="$T/work" --output="$T/work/task-%a.out" \
  --cpus-per-task=1 --wrap="'$stretto' sweep '$spec' -j 1 --format json > /dev/null") \
  || die "sbatch failed"
echo "submitted array job $jobid" >&2
done_=0
for _ in $(seq 1 480); do
  left=$(squeue -h -j "$jobid" 2>/dev/null | wc -l)
  [ "$left" = 0 ] && { done_=1; break; }
  sleep 0.5
done
[ "$done_" = 1 ] || die "array job $jobid did not finish in 240 s: $(squeue -j "$jobid" 2>&1)"
stem=$(basename "$spec" .json)
shards=()
for i in 0 1 2 3; do
  f="$T/work/$stem.shard${i}of4.db"
  [ -s "$f" ] || die "task $i wrote no $f: $(cat "$T/work/task-$i.out" 2>/dev/null)"
  grep -q "in shard $i/4" "$T/work/task-$i.out" || die "task $i did not run shard $i/4: $(cat "$T/work/task-$i.out")"
  shards+=("$f")
done
(cd "$T/work" && "$stretto" sweep merge merged.db "${shards[@]}" --format json >merged.json) \
  || die "merge failed"
(cd "$T/work" && "$stretto" sweep "$spec" --db whole.db -j 2 --format json >whole.json 2>whole.err) \
  || die "unsharded run failed: $(cat "$T/work/whole.err")"
python3 - "$T/work/merged.json" "$T/work/whole.json" <<'PY' || die "merged shards differ from the unsharded run"
import json, sys
def load(p):
    j = json.load(open(p))
    for r in j["results"]:
        r.pop("wall_ms", None)
        if "metrics" in r: r["metrics"].pop("sim_wall_ms", None)
    j.pop("database", None)
    return j
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    print("merged:", a["points"], "whole:", b["points"], file=sys.stderr)
    sys.exit(1)
print(f"PASS: 4 Slurm array tasks, merged {a['points']} points ({a['ok']} ok, "
      f"{a['over_capacity']} over capacity, {a['invalid']} invalid) = the unsharded run")
PY
