#!/usr/bin/env bash
# A port another process listens on: serve and dht say so and how to pick another, rather than CAF's wrapping.
set -u
bin="$1" model="$2"
dir=$(mktemp -d)
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(60)' > "$dir/port" &
holder=$!
for _ in $(seq 50); do [ -s "$dir/port" ] && break; sleep 0.1; done
port=$(cat "$dir/port")
fail=0
want="cannot listen on 127.0.0.1:$port: Address already in use; pick another port with --port (0: any free one)"
out=$("$bin" serve --model "$model" --new_swarm --port "$port" --data_dir "$dir/node" 2>&1)
if [[ "$out" == *"$want"* ]]; then echo "ok: serve"; else echo "FAILED: serve: $out"; fail=1; fi
out=$("$bin" dht --port "$port" 2>&1)
if [[ "$out" == *"$want"* ]]; then echo "ok: dht"; else echo "FAILED: dht: $out"; fail=1; fi
kill "$holder"
wait
rm -rf "$dir"
exit $fail
