#!/usr/bin/env bash
# The cost of spot checks to a client, side by side: `corolla generate` through a swarm of four servers (two per
# half of the model) with checks at the default rate (every 64 steps per hop, and the first step on each server,
# which every new client process checks) against checks off. Prints farm-bench's pairwise ratio of wall times and
# each run's tokens/s.
#   bash bench/spot_check_cost.sh [MODEL] [NEW_TOKENS] [RUNS] [BLOCKS]   (default: the demo model, 128, 5, 30)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin/corolla
model=${1:-demo}
tokens=${2:-128}
runs=${3:-5}
blocks=${4:-30}  # the model's transformer blocks (the demo model has 30)
source bench/swarm_nodes.sh
boot=$(start dht dht --port 0 --data_dir "$work/dht")
half=$((blocks / 2))
for i in 0 1; do
  start "a$i" serve --model "$model" --block_indices "0:$half" --port 0 --initial_peers "$boot" --threads 1 \
    --data_dir "$work/a$i" --swarm_id spotcheck >/dev/null
  start "b$i" serve --model "$model" --block_indices "$half:$blocks" --port 0 --initial_peers "$boot" --threads 1 \
    --data_dir "$work/b$i" --swarm_id spotcheck >/dev/null
done
sleep 3  # the servers announce themselves
gen="$bin generate --model $model --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens $tokens --ignore-eos --threads 1 \
--initial_peers $boot --swarm_id spotcheck"
echo "spot checks at the default rate (A) against none (B): $tokens tokens, four servers, $(nproc) cores"
farm-bench -n "$runs" --timeout 1200 --vs "sh -c 'exec $gen --spot_check_every 0 2>>$work/off.txt >/dev/null'" \
  -- sh -c "exec $gen --spot_check_every 64 2>>$work/on.txt >/dev/null"
echo "A (checks every 64) tokens/s per run:"; grep -o '[0-9.]* tokens/s' "$work/on.txt" | tr '\n' ' '; echo
echo "B (no checks) tokens/s per run:      "; grep -o '[0-9.]* tokens/s' "$work/off.txt" | tr '\n' ' '; echo
