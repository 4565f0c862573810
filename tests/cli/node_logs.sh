#!/usr/bin/env bash
# What nodes log (actors/log/node_log.hpp): quiet by default; with --log_level (before or after the subcommand)
# or COROLLA_LOG, one line per event from the part that saw it: the DHT joined, a session opened and closed on
# the server and on the client; a bad level is refused with the levels and parts there are. Processes on
# 127.0.0.1, stopped by PID.
set -u
bin="$1"
model="$2"
source "$(dirname "$0")/common.sh"

"$bin" dht --port 0 > "$dir/dht.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "dht node at" "$dir/dht.out" && break; sleep 0.1; done
dht=$(grep -o "dht node at [0-9.:]*" "$dir/dht.out" | awk '{print $NF}')
"$bin" --log_level info serve "$model" --block_indices 0:4 --port 0 --initial_peers "$dht" --data_dir "$dir/node" \
  > "$dir/serve.out" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q "serving" "$dir/serve.out" && break; sleep 0.1; done

gen() { "$bin" generate --model "$model" --prompt-ids 1,2,3 --max-new-tokens 3 --initial_peers "$dht" "$@"; }
quiet=$(gen 2>&1 >/dev/null)
[[ "$quiet" != *"session info"* && "$quiet" != *"dht info"* ]] && echo "ok: quiet by default" ||
  { echo "FAILED: logs without --log_level: $quiet"; fail=1; }
out=$(gen --log_level info 2>&1 >/dev/null)
check "the client's DHT join" "dht info: joined: 1 of 1 initial peers answered" "$out"
check "the client's session opened, with its route" "session info: opened: route 127.0.0.1:" "$out"
check "... and closed" "session info: closed: steps" "$out"
out=$(COROLLA_LOG=warn,session=info gen 2>&1 >/dev/null)
check "COROLLA_LOG by part" "session info: opened" "$out"
[[ "$out" != *"dht info"* ]] && echo "ok: COROLLA_LOG leaves other parts at the default" ||
  { echo "FAILED: dht logged at info under warn,session=info"; fail=1; }
sleep 0.5
served=$(cat "$dir/serve.out")
check "the server's DHT join" "dht info: joined" "$served"
check "the server's session opened" "server info: session opened: " "$served"
check "... and closed" "server info: session closed: " "$served"
out=$(gen --log_level dht=loud 2>&1); check "a bad level" "log level 'dht=loud': levels are trace, debug, info" "$out"
out=$(gen --log_level disk=info 2>&1); check "a part that does not exist" "no part named 'disk'" "$out"
exit $fail
