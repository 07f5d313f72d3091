#!/usr/bin/env bash
# Builds a fuzzer with clang (ASan + UBSan) and runs it.
# Usage: fuzz/run.sh [seconds] [target]   (default 60 s, plan_fuzz). Targets:
#   plan_fuzz     plan JSON -> parse -> compile -> simulate; seeds: examples/ (builder plans
#                 in examples/builders/ too), tests/data/schedules/
#   csv_fuzz      torch action CSV importer; seeds: tests/data/builders/*.csv, fuzz/corpus-csv/
#   profile_fuzz  measured cost table reader; seeds: tests/data/costmodel/, fuzz/corpus-profile/
#   sweep_fuzz    sweep spec (inline base plan) -> grid -> point plans -> compile, estimate,
#                 folded simulation; seeds: fuzz/corpus-sweep/ (the example specs, base inlined)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
target=${2:-plan_fuzz}
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRETTO_FUZZ=ON -DSTRETTO_BUILD_TESTS=OFF -DSTRETTO_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" >/dev/null
cmake --build build-fuzz --target "$target"
case "$target" in
  plan_fuzz)
    work=fuzz/corpus-work; corpus=fuzz/corpus; max_len=16384
    mkdir -p "$work"
    cp -n examples/*.json examples/builders/*.json tests/data/schedules/ok/*.json \
      tests/data/schedules/bad/*.json "$work"/ 2>/dev/null || true ;;
  csv_fuzz)
    work=fuzz/corpus-csv-work; corpus=fuzz/corpus-csv; max_len=8192
    mkdir -p "$work"
    cp -n tests/data/builders/*.csv "$corpus"/* "$work"/ 2>/dev/null || true ;;
  profile_fuzz)
    work=fuzz/corpus-profile-work; corpus=fuzz/corpus-profile; max_len=16384
    mkdir -p "$work"
    cp -n tests/data/costmodel/*.json "$corpus"/* "$work"/ 2>/dev/null || true ;;
  sweep_fuzz)
    work=fuzz/corpus-sweep-work; corpus=fuzz/corpus-sweep; max_len=16384
    mkdir -p "$work"
    cp -n "$corpus"/* "$work"/ 2>/dev/null || true ;;
  *) echo "unknown target $target"; exit 2 ;;
esac
log=fuzz/last-run-$target.log
# Findings (crash-*, leak-*, timeout-*, slow-unit-*) go to fuzz/, not the current directory.
./build-fuzz/fuzz/"$target" "$work" -max_total_time="$secs" -max_len="$max_len" -timeout=60 \
  -artifact_prefix=fuzz/ \
  -rss_limit_mb=4096 -print_final_stats=1 > "$log" 2>&1 || true
grep -E "^(stat::|Done|SUMMARY)|crash-|deadly|ERROR" "$log" || true
echo "full log: $log; merge new inputs with: build-fuzz/fuzz/$target -merge=1 $corpus $work"
