#!/usr/bin/env bash
# Builds everything and runs every test (the README's second command), then replays the fuzz
# corpora under ASan and UBSan in a separate build directory (scripts/fuzz_replay_asan.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRETTO_WERROR=${STRETTO_WERROR:-OFF} >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
bash scripts/fuzz_replay_asan.sh "$jobs"
