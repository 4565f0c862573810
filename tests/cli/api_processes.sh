#!/usr/bin/env bash
# `corolla api --config` in front of a swarm of other processes (a `corolla dht` node and two `corolla serve`
# servers splitting the tiny golden Llama), all on loopback and stopped by PID; then `corolla run`'s errors.
# With the demo model downloaded, also `corolla run --prompt` (the README's first command).
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
model="$root/tests/data/models/llama"
tok="$root/tests/data/tokenizers/bpe-tiny256"
dir=$(mktemp -d)
pids=()
fail=0
# Stopped newest first, each waited for: servers announce "offline" to the DHT node before they exit.
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null; wait "${pids[$i]}" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
check() {  # check NAME EXPECTED_SUBSTRING ACTUAL
  if [[ "$3" == *"$2"* ]]; then echo "ok: $1"; else echo "FAILED: $1: expected '$2' in: $3"; fail=1; fi
}
wait_line() {  # wait_line FILE PATTERN
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "FAILED: no '$2' in $1: $(cat "$1")"
  for log in "$dir"/dht "$dir"/serve-*; do [ "$log" != "$1" ] && [ -f "$log" ] && echo "--- $log:" && cat "$log"; done
  exit 1
}
fetch() {  # fetch URL [JSON_BODY] -> prints "STATUS BODY"
  python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode() if len(sys.argv) > 2 else None,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r: print(r.status, r.read().decode())
except urllib.error.HTTPError as e: print(e.code, e.read().decode())
PY
}

"$bin" dht --port 0 > "$dir/dht" 2>&1 &
pids+=($!)
wait_line "$dir/dht" "dht node at"
dht=$(awk '/dht node at/ {print $NF}' "$dir/dht")
# The second server holds its KV caches in f16 (--kv_cache_dtype): half the memory, the same chat through it.
for span in 0:2 2:4; do
  kv=f32
  [ "$span" = 2:4 ] && kv=f16
  "$bin" serve --model "$model" --block_indices "$span" --port 0 --initial_peers "$dht" --data_dir "$dir/$span" \
    --kv_cache_dtype "$kv" > "$dir/serve-$span" 2>&1 &
  pids+=($!)
done
for span in 0:2 2:4; do wait_line "$dir/serve-$span" "serving blocks"; done
check "the second server's caches are f16" "KV caches in f16" "$(cat "$dir/serve-2:4")"

cat > "$dir/api.toml" <<TOML
port = 0
initial_peers = ["$dht"]
max_sessions = 4
state_ttl_s = 0.0
[[model]]
name = "tiny"
path = "$model"
tokenizer = "$tok"
TOML
"$bin" api --config "$dir/api.toml" > "$dir/api" 2>&1 &
pids+=($!)
wait_line "$dir/api" "api at"
base=$(sed -n 's/^api at \(http:[^ ]*\)\/ .*/\1/p' "$dir/api")
check "models" '"id":"tiny"' "$(fetch "$base/v1/models")"
out=$(fetch "$base/v1/chat/completions" '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0}')
check "chat completion through two server processes" '"completion_tokens":5' "$out"
check "chat completion status" "200 " "$out"
out=$(fetch "$base/api/v1/state")
check "state lists both servers online" '"coverage":[1,1,1,1]' "$out"
check "metrics" "corolla_api_requests_total" "$(fetch "$base/metrics")"
check "unknown model" "404 " "$(fetch "$base/v1/completions" '{"model":"x","prompt":"a"}')"

# Configuration and start-up errors are clear.
printf 'port = 0\ninitial_peers = ["%s"]\nmax_session = 3\n[[model]]\npath = "%s"\n' "$dht" "$model" > "$dir/bad.toml"
check "unknown key in the API config" "unknown key 'max_session' (did you mean 'max_sessions'?)" \
  "$("$bin" api --config "$dir/bad.toml" 2>&1)"
printf 'port = 0\ninitial_peers = ["%s"]\n' "$dht" > "$dir/nomodel.toml"
check "API config without a model" "add at least one [[model]]" "$("$bin" api --config "$dir/nomodel.toml" 2>&1)"
port=$(echo "$base" | sed 's/.*://')
check "corolla run on a busy port" "pick another port with --port" \
  "$("$bin" run --model "$model" --tokenizer "$tok" --port "$port" 2>&1)"

demo="${COROLLA_CACHE:-$HOME/.cache/corolla}/demo/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -f "$demo" ]; then
  out=$("$bin" run --prompt "Name the capital of France." --max-new-tokens 24 2>/dev/null)
  check "corolla run --prompt answers" "Paris" "$out"
  # Petals' API on the demo model: the reply ends at the model's end of turn, whose "<|im_end|>" the client did
  # not ask to see (chat.petals.dev's page stops at its own sequence and would show it).
  demo_port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  "$bin" run --port "$demo_port" > "$dir/run-demo" 2>&1 &
  pids+=($!)
  wait_line "$dir/run-demo" "chat page"
  out=$(fetch "http://127.0.0.1:$demo_port/api/v1/generate" \
    '{"model": "demo", "inputs": "<|im_start|>user\nName the capital of France.<|im_end|>\n<|im_start|>assistant\n", "max_new_tokens": 40}')
  check "Petals' API answers on the demo model" "Paris" "$out"
  if [[ "$out" == *"im_end"* ]]; then echo "FAILED: the end of turn shows in the reply: $out"; fail=1
  else echo "ok: the end of turn does not show in the reply"; fi
else
  echo "(the demo model is not downloaded: corolla run --prompt not checked)"
fi
[ $fail = 0 ] && echo "all checks passed"
exit $fail
