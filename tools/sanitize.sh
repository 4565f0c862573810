#!/usr/bin/env bash
# Builds everything with AddressSanitizer and UndefinedBehaviorSanitizer under build-asan/ (g++, no CUDA) and runs
# the unit and integration tests there. Extra arguments go to ctest (e.g. -R test_basp_filter).
#   bash tools/sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build-asan/CMakeCache.txt ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOROLLA_SANITIZE=address,undefined -DCOROLLA_CUDA=OFF \
    >/dev/null
fi
cmake --build build-asan -j"$(nproc)"
# Leaks are reported too; CAF's and RocksDB's process-lifetime singletons are not leaks of ours.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tools/sanitizers/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tools/sanitizers/ubsan.supp}
ctest --test-dir build-asan --output-on-failure -L "unit|integration" -j"$(nproc)" "$@"
