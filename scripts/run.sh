#!/usr/bin/env bash
# The main job (README's first command): installs what is missing, builds `stretto`, simulates
# an example plan, prints the prediction and writes a Perfetto trace.
# Usage: scripts/run.sh [PLAN]   (default: examples/gpt_pp4_dp2_1f1b.json)
set -euo pipefail
cd "$(dirname "$0")/.."
plan=${1:-examples/gpt_pp4_dp2_1f1b.json}
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target stretto -j "$(nproc)"
mkdir -p out
trace="out/$(basename "${plan%.json}").trace.json"
./build/stretto simulate "$plan" --format table --critical-path --trace "$trace"
