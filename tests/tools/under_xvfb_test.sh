#!/bin/bash
# Checks scripts/under_xvfb.sh against stand-ins for xvfb-run that fail the ways the real
# one does: it must report the command's own status, retry when the command never ran, and give
# up with 125 after three tries.
set -u
here=$(cd "$(dirname "$0")/../../scripts" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail=0
check() {  # check NAME WANT GOT
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAILED: $1: wanted $2, got $3"; fail=1; fi
}
stand_in() {  # stand_in BODY: an xvfb-run whose arguments are -a -s SCREEN COMMAND...
  mkdir -p "$t/bin"
  printf '#!/bin/bash\nshift 3\n%s\n' "$1" > "$t/bin/xvfb-run"
  chmod +x "$t/bin/xvfb-run"
}
export TMPDIR=$t
# The command ran and exited 2; xvfb-run then failed to remove its temporary directory (5).
stand_in '"$@"; exit 5'
PATH="$t/bin:$PATH" "$here/under_xvfb.sh" /bin/bash -c 'exit 2' 2> "$t/err"
check "the command's status, not xvfb-run's cleanup status" 2 $?
grep -q "xvfb-run exited 5 after the command exited 2" "$t/err"
check "the mismatch is said on stderr" 0 $?
# The command's standard output passes through.
PATH="$t/bin:$PATH" "$here/under_xvfb.sh" /bin/echo hello > "$t/out" 2> /dev/null
check "standard output passes through" hello "$(cat "$t/out")"
# Xvfb did not start the first time (exit 1 before the command ran), then did.
stand_in 'if [ ! -e "$TMPDIR/started" ]; then touch "$TMPDIR/started"; exit 1; fi; "$@"'
PATH="$t/bin:$PATH" "$here/under_xvfb.sh" /bin/bash -c 'exit 3' 2> "$t/err"
check "retried after a failed start, then the command's status" 3 $?
grep -q "before the command ran (try 1 of 3)" "$t/err"
check "the failed start is said on stderr" 0 $?
# Xvfb never starts.
stand_in 'exit 1'
PATH="$t/bin:$PATH" "$here/under_xvfb.sh" /bin/true 2> "$t/err"
check "gives up after three failed starts" 125 $?
check "three tries said" 3 "$(grep -c 'before the command ran' "$t/err")"
exit $fail
