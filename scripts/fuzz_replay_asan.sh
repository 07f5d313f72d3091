#!/usr/bin/env bash
# Replays the checked-in fuzz corpora under AddressSanitizer and UndefinedBehaviorSanitizer
# (scripts/test.sh runs it after the regular suite, so CI does). A separate build directory,
# build-asan/, with the optional leaves that the corpora do not reach switched off (LibTorch,
# GUI, Python, benchmarks); only the *_fuzz_replay_test executables and the libraries they link
# are built, and only their ctest tests run. Any sanitizer report aborts the test
# (-fno-sanitize-recover=all), so it fails.
# Usage: scripts/fuzz_replay_asan.sh [jobs]   (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-$(nproc)}
dir=${STRETTO_ASAN_BUILD_DIR:-build-asan}
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# Unoptimised with line tables only: the quickest to compile on CI's 2 cores, and the reports
# still name file:line.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
  -DSTRETTO_WITH_TORCH=OFF -DSTRETTO_WITH_GUI=OFF -DSTRETTO_WITH_PYTHON=OFF \
  -DSTRETTO_BUILD_BENCH=OFF -DSTRETTO_JEMALLOC=OFF -DSTRETTO_WERROR=OFF >/dev/null
targets=(fuzz_replay_test csv_fuzz_replay_test profile_fuzz_replay_test sweep_fuzz_replay_test)
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir" --output-on-failure -j "$jobs" -R '^FuzzReplay\.'
