# Sourced by the command-line tests: `check` prints ok or FAILED (and sets fail=1), `dir` is a fresh folder, and
# every PID added to `pids` is stopped, then `dir` removed, when the test exits.
fail=0
check() {  # check NAME EXPECTED_SUBSTRING ACTUAL
  if [[ "$3" == *"$2"* ]]; then echo "ok: $1"; else echo "FAILED: $1: expected '$2' in: $3"; fail=1; fi
}
dir=$(mktemp -d)
pids=()
stop_started() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$dir"; }
trap stop_started EXIT
