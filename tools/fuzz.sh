#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz) with clang, libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer under
# build-fuzz/, then runs each for a fixed time on a working copy of its committed corpus.
#   bash tools/fuzz.sh                  every target, FUZZ_SECONDS each (default 30)
#   bash tools/fuzz.sh gguf_header ...  only these
#   FUZZ_RUNS=10000000 bash tools/fuzz.sh NAME   10 M executions, or an hour (FUZZ_SECONDS) if they take longer
# A crash, leak, or input slower than FUZZ_TIMEOUT seconds (default 1; more for a niced run on a busy machine, where
# ASan's own bookkeeping can stall a run past 1 s) fails the run; its input is kept in build-fuzz/artifacts/NAME/
# (add it to tests/fuzz/corpus/NAME once fixed: every build replays that folder). Prints one line per target.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
jobs=$(nproc)
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-dev >/dev/null ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >/dev/null
fi
if [ ! -f build-fuzz/CMakeCache.txt ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOROLLA_FUZZ=ON \
    -DCOROLLA_SANITIZE=address,undefined -DCOROLLA_CUDA=OFF >/dev/null
fi
targets=("$@")
# Named targets build alone (a long run of one target need not build every other under the sanitizers).
if ((${#targets[@]} == 0)); then
  cmake --build build-fuzz -j"$jobs" --target fuzz_all
else
  cmake --build build-fuzz -j"$jobs" --target "${targets[@]/#/fuzz_}"
fi
if ((${#targets[@]} == 0)); then
  for f in build-fuzz/bin/fuzz_*; do
    name=$(basename "$f"); name=${name#fuzz_}
    [[ $name == replay_* ]] && continue
    targets+=("$name")
  done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
for name in "${targets[@]}"; do
  work=build-fuzz/corpus-work/$name artifacts=build-fuzz/artifacts/$name
  mkdir -p "$work" "$artifacts"
  limit=(-max_total_time="$seconds")
  # With FUZZ_RUNS, that many executions, or FUZZ_SECONDS (then default 3600) if they take longer.
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS" -max_total_time="${FUZZ_SECONDS:-3600}")
  log=build-fuzz/fuzz-$name.log
  started=$SECONDS
  if build-fuzz/bin/fuzz_"$name" "${limit[@]}" -timeout="${FUZZ_TIMEOUT:-1}" -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo '?')
    echo "fuzz $name: ok, $runs executions ($rate/s, $((SECONDS - started)) s), coverage $cov, 0 crashes, leaks or slow inputs"
  else
    failed=1
    echo "fuzz $name: FAILED (log: $log, inputs: $artifacts/)"
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -5 || true
  fi
done
exit $failed
