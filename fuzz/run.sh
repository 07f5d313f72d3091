#!/usr/bin/env bash
# Builds the plan fuzzer with clang (ASan + UBSan) and runs it.
# Usage: fuzz/run.sh [seconds]   (default 60). Seeds: examples/ and tests/data/schedules/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRETTO_FUZZ=ON -DSTRETTO_BUILD_TESTS=OFF -DSTRETTO_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" >/dev/null
cmake --build build-fuzz --target plan_fuzz
mkdir -p fuzz/corpus-work
cp -n examples/*.json tests/data/schedules/ok/*.json tests/data/schedules/bad/*.json fuzz/corpus-work/ 2>/dev/null || true
./build-fuzz/fuzz/plan_fuzz fuzz/corpus-work -max_total_time="$secs" -max_len=16384 -timeout=10 \
  -rss_limit_mb=4096 -print_final_stats=1 > fuzz/last-run.log 2>&1 || true
grep -E "^(stat::|Done|SUMMARY)|crash-|deadly|ERROR" fuzz/last-run.log || true
echo "full log: fuzz/last-run.log; merge new inputs with: build-fuzz/fuzz/plan_fuzz -merge=1 fuzz/corpus fuzz/corpus-work"
