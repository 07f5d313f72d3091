#!/usr/bin/env bash
# Redraws every picture README.md shows, with the project's own commands:
#   gui_edit_microbatches.png  the GUI after an edit, against the pinned baseline (under Xvfb)
#   sweep_gpt_layouts_64.svg   `stretto sweep --plot` of examples/sweeps/gpt_layouts_64.json
#   validate_replay.png        a measured CPU replay opened in the GUI against the prediction,
#                              with the difference lanes (under Xvfb)
# The validate picture reads what docs/images/data holds: a plan priced by a profiled table,
# that table (`stretto profile`) and a replay's trace (`stretto replay --trace`), measured on
# 2026-11-27 on a shared 2-core CPU host at load average about 1 (predicted step 52.7 ms; the
# replay's median step 52.8 ms, the traced step 58.7 ms). `--measure` measures them again first
# (needs the LibTorch backend, build/stretto-backend); without it every picture follows from the
# repository alone.
#
# usage: scripts/readme_images.sh [--measure] [STRETTO [OUT_DIR]]
#        (defaults: build/stretto, docs/images; tests/gui/window_test.cpp runs it into build/)
set -euo pipefail
cd "$(dirname "$0")/.."
measure=0
if [[ "${1:-}" == "--measure" ]]; then
  measure=1
  shift
fi
stretto=${1:-build/stretto}
out=${2:-docs/images}
data=docs/images/data
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v pngquant > /dev/null || { echo "error: pngquant is missing (scripts/setup.sh installs it)" >&2; exit 1; }
gui() {  # gui PLAN SCRIPT_TEXT PNG: the window at 1600x900, no hover, the last frame saved,
         # then quantized to 256 colours (a quarter of the bytes; the UI has few colours)
  printf '%b' "$2" > "$tmp/gui.script"
  scripts/under_xvfb.sh --screen 1600x900x24 "$stretto" gui "$1" --script "$tmp/gui.script" --frames 2 \
    --size 1600x900 --screenshot "$tmp/shot.png" > "$tmp/gui.log" 2>&1 || { cat "$tmp/gui.log" >&2; exit 1; }
  pngquant --force --strip --output "$3" 256 "$tmp/shot.png"
  echo "wrote $3"
}

# Tune in the GUI: pin, raise the microbatches from 8 to 12, compare (one lane per device).
gui examples/gpt_pp4_dp2_1f1b_builder.json \
  'wait\npin\ntype microbatches 12\nwait\nclick tab compare\nkey L\nframes 3\n' \
  "$out/gui_edit_microbatches.png"

# Sweep: 432 layouts x families x microbatches x ZeRO levels of GPT 1.3B on 64 H100s.
"$stretto" sweep examples/sweeps/gpt_layouts_64.json --db "$tmp/layouts.db" -j 2 --format json \
  --plot "$out/sweep_gpt_layouts_64.svg" > /dev/null 2> "$tmp/sweep.log" || { cat "$tmp/sweep.log" >&2; exit 1; }
echo "wrote $out/sweep_gpt_layouts_64.svg"

# Validate: the measured replay against the prediction from the profiled table.
if (( measure )); then
  export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  "$stretto" profile examples/cpu_gpt_pp2_1f1b.json -o "$data/cpu_gpt_pp2_1f1b.profile.json" \
    --iterations 10 --warmup 2 --rounds 2 --format json > /dev/null
  "$stretto" replay "$data/cpu_gpt_pp2_1f1b_profiled.json" --iterations 10 --warmup 2 \
    --trace "$data/cpu_gpt_pp2_1f1b.replay.trace.json" --format json > /dev/null
fi
gui "$data/cpu_gpt_pp2_1f1b_profiled.json" \
  "wait\nopen-trace $data/cpu_gpt_pp2_1f1b.replay.trace.json\nwait\nclick tab compare\nframes 3\n" \
  "$out/validate_replay.png"
