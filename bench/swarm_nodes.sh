# Sourced by the bench scripts that start swarms of `corolla` processes: a scratch directory ($work) removed on
# exit with every node started, and start(), which runs a node in the background and prints its address.
# Needs $bin (the corolla binary) set by the caller.
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# start NAME ARGS...: starts `corolla ARGS...`; prints the address from its first line ("... at HOST:PORT" /
# "dht node at HOST:PORT").
start() {
  local log=$work/$1.log; shift
  "$bin" "$@" >"$log" 2>"$log.err" &
  pids+=($!)
  for _ in $(seq 600); do
    [ -s "$log" ] && { head -1 "$log" | sed 's/.* at //'; return; }
    sleep 0.1
  done
  echo "node $* did not start: $(cat "$log.err")" >&2
  exit 1
}
