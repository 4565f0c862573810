#!/usr/bin/env bash
# Models by Hub name against a Hub-compatible server on loopback (tests/hub/hub_server.py, with its LFS files on a
# second port as the Hub's CDN is on another host): the same tokens as from the local folder, the shared cache
# layout, servers that fetch only their blocks' tensors by byte ranges, a client of a swarm only the head's, a
# resumed download, offline use, and clear errors (no such model or revision, gated without a token, content that
# does not match its etag, an endpoint that cannot be reached). Every process started is stopped by PID.
set -u
bin="$1"
models="$2"
tokenizer="$3"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/common.sh"

start_hub() {  # start_hub PORTS_FILE LOG ARGS...: sets hub_port, cdn_port
  local ports="$1" log="$2"; shift 2
  python3 "$here/../hub/hub_server.py" --ports-file "$ports" --log "$log" \
    --repo "test-org/llama-sharded=$models/llama-sharded:$tokenizer" --repo "test-org/llama=$models/llama:$tokenizer" \
    --repo "test-org/gated=$models/llama:$tokenizer" --gated test-org/gated --token secret-token \
    --repo "test-org/corrupt=$models/llama:$tokenizer" --corrupt test-org/corrupt \
    --repo "test-org/huge=$models/llama:$tokenizer" --claim-size test-org/huge=1000000000000000000 "$@" &
  pids+=($!)
  for _ in $(seq 100); do [ -f "$ports" ] && break; sleep 0.1; done
  read -r hub_port cdn_port < "$ports"
}
start_hub "$dir/ports" "$dir/log.jsonl" --cut test-org/llama=100000
export HF_ENDPOINT="http://127.0.0.1:$hub_port" HF_HOME="$dir/hf" COROLLA_CACHE="$dir/corolla"
unset HF_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HF_TOKEN_PATH
gen() { "$bin" generate --prompt "Hello" --raw --max-new-tokens 6 --temperature 0 "$@"; }

# A bare "org/name" with the model's tokenizer merged in, so text goes in and out.
mkdir -p "$dir/local" && cp "$models/llama-sharded/"* "$tokenizer/"* "$dir/local/"
expected=$(gen --model "$dir/local" 2>/dev/null)
[ -n "$expected" ] || { echo "FAILED: no output from the local folder"; fail=1; }
out=$(gen --model test-org/llama-sharded 2>"$dir/err"); check "by name, the local folder's tokens" "$expected" "$out"
[ "$out" == "$expected" ] || { echo "FAILED: '$out' != '$expected'"; fail=1; }
repo="$dir/hf/hub/models--test-org--llama-sharded"
commit=$(cat "$repo/refs/main" 2>/dev/null)
[[ "$commit" =~ ^[0-9a-f]{40}$ ]] && echo "ok: refs/main holds the commit" || { echo "FAILED: refs/main: '$commit'"; fail=1; }
link=$(readlink "$repo/snapshots/$commit/model-00001-of-00003.safetensors")
check "snapshots link into blobs as huggingface_hub's do" "../../blobs/" "$link"
cmp -s "$repo/snapshots/$commit/config.json" "$models/llama-sharded/config.json" && echo "ok: config.json content" \
  || { echo "FAILED: config.json differs"; fail=1; }

# A whole download broken after 100000 bytes resumes where it stopped.
out=$(gen --model test-org/llama 2>"$dir/err"); check "a broken download resumes" "$expected" "$out"
check "the resumption is said" "resuming" "$(cat "$dir/err")"
check "it asked for the rest only" '"range": "bytes=100000-"' "$(cat "$dir/log.jsonl")"

# A GGUF file of a repository, by tag or by name (as llama.cpp's -hf takes them).
ids() { "$bin" generate --prompt-ids 1,2,3 --max-new-tokens 6 --temperature 0 "$@"; }
gguf_expected=$(ids --model "$models/llama/model-q8_0.gguf" 2>/dev/null)
out=$(ids --model test-org/llama:Q8_0 2>"$dir/err"); check "a GGUF file by its tag" "$gguf_expected" "$out"
[ -n "$gguf_expected" ] && [ "$out" == "$gguf_expected" ] || { echo "FAILED: '$out' != '$gguf_expected'"; fail=1; }
[ -L "$dir/hf/hub/models--test-org--llama/snapshots/$(cat "$dir/hf/hub/models--test-org--llama/refs/main")/model-q8_0.gguf" ] \
  && echo "ok: the GGUF file where huggingface_hub puts it" || { echo "FAILED: no snapshot link to the GGUF file"; fail=1; }
out=$(ids --model test-org/llama:model-q8_0.gguf 2>&1); check "a GGUF file by its name" "$gguf_expected" "$out"
out=$(ids --model test-org/llama:Q4 2>&1); check "a tag that names several" "several GGUF files match 'Q4'" "$out"
out=$(ids --model test-org/llama:Q3_K_S 2>&1); check "a tag that names none" "no GGUF file of the repository matches" "$out"
out=$(HF_HUB_OFFLINE=1 ids --model test-org/llama:Q8_0 2>&1); check "a GGUF file offline" "$gguf_expected" "$out"

# Offline: what was fetched serves with the endpoint unreachable; what was not is named.
out=$(HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 gen --model test-org/llama-sharded 2>&1)
check "offline, from the cache" "$expected" "$out"
out=$(HF_HUB_OFFLINE=1 gen --model test-org/never-fetched 2>&1)
check "offline, a model never fetched" "HF_HUB_OFFLINE is set and test-org/never-fetched was never fetched" "$out"

# Errors that say what happened.
out=$(gen --model test-org/nope 2>&1); check "no such model" "no model test-org/nope on http://127.0.0.1:$hub_port" "$out"
out=$(gen --model test-org/llama@v9 2>&1); check "no such revision" "no revision 'v9' in test-org/llama" "$out"
out=$(gen --model test-org/gated 2>&1); check "gated without a token" "test-org/gated is gated (HTTP 401)" "$out"
out=$(HF_TOKEN=secret-token gen --model test-org/gated 2>"$dir/err"); check "gated with HF_TOKEN" "$expected" "$out"
mkdir -p "$dir/hf" && echo "secret-token" > "$dir/hf/token"
rm -rf "$dir/hf/hub/models--test-org--gated" "$dir/corolla/hub/models--test-org--gated"
out=$(gen --model test-org/gated 2>"$dir/err"); check "gated with the token file" "$expected" "$out"
rm "$dir/hf/token"
if grep '"port": '"$cdn_port" "$dir/log.jsonl" | grep -q '"auth": true'; then
  echo "FAILED: the token went to the CDN host"; fail=1
else echo "ok: the token goes to the endpoint only"; fi
out=$(gen --model test-org/corrupt 2>&1); check "content that does not match its etag" "does not match its etag" "$out"
[ -z "$(ls "$dir/hf/hub/models--test-org--corrupt/blobs/" | grep -v -E '^[0-9a-f]{40}$')" ] \
  && echo "ok: no blob kept of it" || { echo "FAILED: a corrupt blob was kept"; fail=1; }
out=$(gen --model test-org/huge 2>&1); check "a size that cannot fit is refused before downloading" "test-org/huge/model.safetensors needs 931322574.62 GiB" "$out"
check "... saying what is free" "GiB free" "$out"
out=$(HF_ENDPOINT=http://127.0.0.1:1 gen --model test-org/llama-sharded 2>&1)
check "an endpoint that cannot be reached" "could not connect to 127.0.0.1:1" "$out"
check "... and what to do" "HF_HUB_OFFLINE=1" "$out"
out=$(HF_ENDPOINT=ftp://x gen --model test-org/llama-sharded 2>&1); check "a bad HF_ENDPOINT" "is not a http:// or https:// URL" "$out"
out=$("$bin" tokenize --model test-org/llama-sharded "Hello" 2>&1); check "tokenize by name" "$("$bin" tokenize --model "$tokenizer" "Hello")" "$out"

# A swarm by name, everything fresh: each server fetches only its blocks' tensors, the client only the head's.
export HF_HOME="$dir/hf-swarm" COROLLA_CACHE="$dir/corolla-swarm"
cdn_bytes() {
  python3 -c "import json; print(sum(e['sent'] for e in map(json.loads, open('$dir/log.jsonl')) if e['port'] == $cdn_port))"
}
shards=$(python3 -c "import glob, os; print(sum(map(os.path.getsize, glob.glob('$models/llama-sharded/model-*.safetensors'))))")
: > "$dir/log.jsonl"
"$bin" dht --port 0 > "$dir/dht.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "dht node at" "$dir/dht.out" && break; sleep 0.1; done
dht=$(grep -o "dht node at [0-9.:]*" "$dir/dht.out" | awk '{print $NF}')
before=0
for span in 0:2 2:4; do
  "$bin" serve test-org/llama-sharded --block_indices "$span" --port 0 --initial_peers "$dht" \
    --data_dir "$dir/data-$span" > "$dir/serve-$span" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do grep -q "serving" "$dir/serve-$span" && break; sleep 0.1; done
  after=$(cdn_bytes)
  # Half of the blocks are 41 % of the shards' bytes; whole shards would be 82 % (two of three).
  [ $((after - before)) -lt $((shards / 2)) ] && echo "ok: the server of $span fetched $((after - before)) of $shards bytes" \
    || { echo "FAILED: the server of $span fetched $((after - before)) of $shards bytes"; fail=1; }
  before=$after
done
check "a server says it fetches some of a shard's tensors" "tensors)" "$(cat "$dir/serve-0:2")"
out=$(gen --model test-org/llama-sharded --initial_peers "$dht" 2>"$dir/err")
check "a swarm of servers that fetched their blocks by name" "$expected" "$out$(cat "$dir/err")"
after=$(cdn_bytes)
# The head (embeddings, final norm, LM head) is 18 % of the bytes; the two shards holding it are 59 %.
[ $((after - before)) -lt $((shards / 2)) ] && echo "ok: the client fetched $((after - before)) of $shards bytes" \
  || { echo "FAILED: the client fetched $((after - before)) of $shards bytes"; fail=1; }
# A server that balances (--num_blocks) fetches block 0 (its throughput is measured on a block), then the span the
# balancer chooses, when it chooses it: 3 blocks' tensors at most (61 % of the shards' bytes), where fetching every
# block would bring the two shards that hold them (82 %). Its caches are its own. A short balance period: a joining
# server re-reads the swarm after a random wait of up to half the period (30 s at the default 120 s), longer than
# this test waits for it to serve.
before=$after
HF_HOME="$dir/hf-balanced" COROLLA_CACHE="$dir/corolla-balanced" "$bin" serve test-org/llama-sharded --num_blocks 2 \
  --mean_balance_check_period 4 --port 0 --initial_peers "$dht" --data_dir "$dir/data-balanced" \
  > "$dir/serve-balanced" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q "serving" "$dir/serve-balanced" && break; sleep 0.1; done
check "a balancing server by name serves the span it chose" "serving blocks" "$(cat "$dir/serve-balanced")"
after=$(cdn_bytes)
[ $((after - before)) -lt $((shards * 7 / 10)) ] && echo "ok: it fetched $((after - before)) of $shards bytes" \
  || { echo "FAILED: the balancing server fetched $((after - before)) of $shards bytes"; fail=1; }
out=$(gen --model test-org/llama-sharded --initial_peers "$dht" 2>"$dir/err")
check "the swarm with it answers the same" "$expected" "$out$(cat "$dir/err")"
exit $fail
