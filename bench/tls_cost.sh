#!/usr/bin/env bash
# What TLS costs a client, side by side: `corolla generate` through a private swarm (mutual TLS on every link,
# certificates from `corolla keys`) against the same swarm without TLS. Both swarms (a DHT node and two servers,
# one per half of the model) run at once; farm-bench times the two clients in turn and prints the pairwise ratio
# of wall times; each run's tokens/s follow.
#   bash bench/tls_cost.sh [MODEL] [NEW_TOKENS] [RUNS] [BLOCKS]   (default: the demo model, 128, 5, 30)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin/corolla
model=${1:-demo}
tokens=${2:-128}
runs=${3:-5}
blocks=${4:-30}  # the model's transformer blocks (the demo model has 30)
source bench/swarm_nodes.sh
"$bin" keys authority --out "$work/keys" --name bench-swarm >/dev/null
for n in boot s0 s1 client; do "$bin" keys issue --authority "$work/keys" --name $n >/dev/null; done
member() { echo "--swarm_authority $work/keys/authority.crt --certificate $work/keys/$1.crt --private_key $work/keys/$1.key"; }
half=$((blocks / 2))
# swarm NAME CREDENTIAL-FLAGS-OF(boot|s0|s1): prints its DHT node's address.
swarm() {
  local name=$1 tls=$2 boot
  boot=$(start "$name-dht" dht --port 0 $( [ "$tls" = yes ] && member boot ))
  start "$name-s0" serve --model "$model" --block_indices "0:$half" --port 0 --initial_peers "$boot" --threads 1 \
    --data_dir "$work/$name-s0" --swarm_id "$name" $( [ "$tls" = yes ] && member s0 ) >/dev/null
  start "$name-s1" serve --model "$model" --block_indices "$half:$blocks" --port 0 --initial_peers "$boot" --threads 1 \
    --data_dir "$work/$name-s1" --swarm_id "$name" $( [ "$tls" = yes ] && member s1 ) >/dev/null
  echo "$boot"
}
tls_boot=$(swarm private yes)
plain_boot=$(swarm plain no)
sleep 3  # the servers announce themselves
gen="$bin generate --model $model --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens $tokens --ignore-eos --threads 1 \
--spot_check_every 0"
echo "a private swarm with TLS (A) against the same without TLS (B): $tokens tokens, two servers, $(nproc) cores"
farm-bench -n "$runs" --timeout 1200 \
  --vs "sh -c 'exec $gen --initial_peers $plain_boot --swarm_id plain 2>>$work/plain.txt >/dev/null'" \
  -- sh -c "exec $gen --initial_peers $tls_boot --swarm_id private $(member client) 2>>$work/tls.txt >/dev/null"
echo "A (TLS) tokens/s per run:    "; grep -o '[0-9.]* tokens/s' "$work/tls.txt" | tr '\n' ' '; echo
echo "B (no TLS) tokens/s per run: "; grep -o '[0-9.]* tokens/s' "$work/plain.txt" | tr '\n' ' '; echo
