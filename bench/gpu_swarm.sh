#!/usr/bin/env bash
# A GPU server in a swarm of processes, on one machine with an NVIDIA GPU: a TinyLlama-shaped random bf16 model
# (make_bench_model), generated from (1) in one process on the GPU, (2) through two `corolla serve --device cuda`
# processes (11 blocks each) with a client (tokenizer-free: --prompt-ids) whose embeddings and LM head run on the GPU,
# then on its CPU, (3) in one process on the CPU for the token ids. Prints each run's tokens/s, and whether the
# greedy ids of (1) and (2) equal those of (3).
#   bash bench/gpu_swarm.sh [BIN_DIR=build/bin] [NEW_TOKENS=64]
set -euo pipefail
cd "$(dirname "$0")/.."
bindir=${1:-build/bin}
tokens=${2:-64}
bin=$bindir/corolla
source bench/swarm_nodes.sh
"$bindir/make_bench_model" --out="$work/model" >/dev/null
prompt=1,2,3,4,5,6,7,8
gen="$bin generate --model $work/model --prompt-ids $prompt --max-new-tokens $tokens --ignore-eos"
ids() { tr -s ' \n' ' ' <"$1"; }

$gen --device cuda >"$work/gpu.out" 2>"$work/gpu.err"
echo "one process on the GPU:   $(tail -n 1 "$work/gpu.err")"

boot=$(start dht dht --port 0)
start s0 serve --model "$work/model" --block_indices 0:11 --port 0 --initial_peers "$boot" --device cuda \
  --data_dir "$work/s0" --swarm_id gpu >/dev/null
start s1 serve --model "$work/model" --block_indices 11:22 --port 0 --initial_peers "$boot" --device cuda \
  --data_dir "$work/s1" --swarm_id gpu >/dev/null
sleep 3  # the servers announce themselves
swarm="$gen --initial_peers $boot --swarm_id gpu --spot_check_every 0"
$swarm --device cuda >"$work/swarm.out" 2>"$work/swarm.err" || { cat "$work/swarm.err"; exit 1; }
echo "two GPU server processes, the client's head on the GPU: $(tail -n 1 "$work/swarm.err")"
$swarm --device cpu >"$work/swarm_cpu.out" 2>"$work/swarm_cpu.err" || { cat "$work/swarm_cpu.err"; exit 1; }
echo "two GPU server processes, the client's head on its CPU: $(tail -n 1 "$work/swarm_cpu.err")"

$gen --device cpu >"$work/cpu.out" 2>"$work/cpu.err"
echo "one process on the CPU:   $(tail -n 1 "$work/cpu.err")"
status=0
for run in gpu swarm swarm_cpu; do
  if [ "$(ids "$work/$run.out")" = "$(ids "$work/cpu.out")" ]; then
    echo "$run: the same $tokens greedy token ids as the CPU"
  else
    echo "$run: token ids differ from the CPU's"; echo "  $run: $(ids "$work/$run.out")"; echo "  cpu: $(ids "$work/cpu.out")"
    status=1
  fi
done
exit $status
