#!/bin/bash
# under_xvfb.sh [--screen WxHxD] COMMAND [ARG...]
#
# Runs COMMAND on a fresh Xvfb display and exits with COMMAND's own exit status. The GUI tests
# and scripts/readme_images.sh run the real window through this, never through xvfb-run
# directly, because xvfb-run's status mixes the command's with its own:
#   - it exits 1 when Xvfb did not start, and 5 when it could not remove its temporary directory
#     after the command had finished (a CI run saw 5 where the GUI had exited 2);
#   - `xvfb-run -a` picks a display number racily when several tests start at once.
# So: starts are serialised under one lock file, the command's status is written by the
# command's own shell into a file, and when that file is empty the command never ran. Then the
# display is tried again (3 tries in all) and, failing that, this script says so and exits 125.
set -u
screen=1280x800x24
if [ "${1:-}" = --screen ]; then
  screen=$2
  shift 2
fi
if [ $# -eq 0 ]; then
  echo "usage: under_xvfb.sh [--screen WxHxD] COMMAND [ARG...]" >&2
  exit 125
fi
if ! command -v xvfb-run > /dev/null || ! command -v flock > /dev/null; then
  echo "under_xvfb.sh: xvfb-run and flock are needed (scripts/setup.sh installs them)" >&2
  exit 125
fi
dir=${TMPDIR:-/tmp}
status=$(mktemp "$dir/stretto-xvfb-status.XXXXXX") || exit 125
trap 'rm -f "$status"' EXIT
for try in 1 2 3; do
  : > "$status"
  flock "$dir/stretto-xvfb.lock" xvfb-run -a -s "-screen 0 $screen" \
    /bin/bash -c '"$@"; echo $? > "$0"' "$status" "$@"
  xvfb=$?
  if [ -s "$status" ]; then
    rc=$(cat "$status")
    if [ "$xvfb" != "$rc" ]; then
      echo "under_xvfb.sh: xvfb-run exited $xvfb after the command exited $rc; reporting $rc" >&2
    fi
    exit "$rc"
  fi
  echo "under_xvfb.sh: xvfb-run exited $xvfb before the command ran (try $try of 3)" >&2
  sleep 1
done
exit 125
