#!/usr/bin/env bash
# The demo model through the command line: a text answer from `generate` (in process and through a 3-server
# swarm) and from `chat`, and clear errors for bad input. Exits 77 (skipped) when the demo model is absent.
set -u
bin="$1"
demo="${COROLLA_CACHE:-$HOME/.cache/corolla}/demo/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$demo" ] || { echo "SKIPPED: the demo model is not downloaded ($demo)"; exit 77; }
fail=0
check() {  # check NAME EXPECTED_SUBSTRING ACTUAL
  if [[ "$3" == *"$2"* ]]; then echo "ok: $1"; else echo "FAILED: $1: expected '$2' in: $3"; fail=1; fi
}
# The question is one the model answers with a clear margin: transformers' own top two logits differ by at least 1.0
# at every step of the answer (for "What is the capital of France?" its first step is a near tie, 0.08, which the
# 8-bit rounding of activations in decode can tip either way).
out=$("$bin" generate --model demo --prompt "Name the capital of France." --max-new-tokens 16 2>/dev/null)
check "generate answers" "Paris" "$out"
out=$(printf 'Name the capital of France.\n/reset\n/quit\n' | "$bin" chat --temperature 0 --max-new-tokens 16 2>/dev/null)
check "chat answers" "Paris" "$out"
check "chat resets" "(conversation cleared)" "$out"
out=$(printf '/help\n/quit\n' | "$bin" chat --temperature 0 --max-new-tokens 4 2>/dev/null)
check "chat takes a mistyped command for one" "unknown command /help (commands: /reset, /quit" "$out"
out=$("$bin" tokenize --model demo "Hello world" 2>&1); check "tokenize with the demo model" "19556 905" "$out"
out=$(printf '\xff bad\n/quit\n' | "$bin" chat 2>/dev/null)
check "chat rejects invalid UTF-8" "not valid UTF-8" "$out"
out=$("$bin" generate --model demo --prompt "" 2>&1); check "empty prompt" "the prompt is empty" "$out"
out=$("$bin" generate --model demo --prompt-ids 1,99999 2>&1); check "id beyond the vocabulary" "outside the vocabulary" "$out"
long=$(python3 -c "print(','.join(['28']*9000))")
out=$("$bin" generate --model demo --prompt-ids "$long" 2>&1); check "prompt beyond the context" "exceeds the context" "$out"
out=$("$bin" generate --model demo --prompt $'\xff' 2>&1); check "invalid UTF-8 prompt" "not valid UTF-8" "$out"
out=$("$bin" generate --model demo --prompts-file /dev/null 2>&1); check "an empty prompts file" "no prompts" "$out"

# Through a swarm of three servers on loopback, stopped by PID.
dir=$(mktemp -d)
pids=()
peers=""
for span in 0:10 10:20 20:30; do
  "$bin" serve --model demo --block_indices "$span" --port 0 --data_dir "$dir/$span" > "$dir/out-$span" 2>/dev/null &
  pids+=($!)
done
for span in 0:10 10:20 20:30; do
  for _ in $(seq 100); do grep -q "serving" "$dir/out-$span" 2>/dev/null && break; sleep 0.1; done
  peers="$peers${peers:+,}$(awk '{print $NF}' "$dir/out-$span")"
done
out=$("$bin" generate --model demo --prompt "Name the capital of France." --max-new-tokens 16 --initial_peers "$peers" 2>/dev/null)
check "generate through a 3-server swarm" "Paris" "$out"
# Beam search through the swarm: the best of 4 beams, what the same search finds in this process.
beams=$("$bin" generate --model demo --prompt "Name a color." --max-new-tokens 10 --num-beams 4 --initial_peers "$peers" 2>/dev/null)
local_beams=$("$bin" generate --model demo --prompt "Name a color." --max-new-tokens 10 --num-beams 4 2>/dev/null)
check "a beam search answers" "sorry" "$local_beams"
check "a beam search through the swarm finds the local one's answer" "$local_beams" "$beams"
out=$("$bin" generate --model demo --prompt "Name a color." --num-beams 4 --temperature 0.7 2>&1)
check "beam search refuses sampling" "needs greedy sampling" "$out"
# Several prompts at once: a session each, batched by the servers; each completion what it is alone.
printf 'Name the capital of France.\n\nName a color.\n' > "$dir/prompts.txt"
out=$("$bin" generate --model demo --prompts-file "$dir/prompts.txt" --max-new-tokens 12 --temperature 0 --initial_peers "$peers" 2>/dev/null)
check "a prompts file gives a JSON line per prompt" '{"index":1,' "$out"
check "the first prompt's completion" "Paris" "$(echo "$out" | head -1)"
alone=$("$bin" generate --model demo --prompt "Name a color." --max-new-tokens 12 --temperature 0 --initial_peers "$peers" 2>/dev/null)
second=$(echo "$out" | sed -n 2p | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["text"])')
if [ -n "$alone" ] && [ "$alone" == "$second" ]; then echo "ok: a batched completion equals the one alone"
else echo "FAILED: a batched completion equals the one alone: '$second' against '$alone'"; fail=1; fi
lines=$(echo "$out" | wc -l); check "one line per prompt" "2" "$lines"
# A terminal chat through the swarm: two turns, the second answered in the light of the first (its session holds
# the whole conversation).
# (Asked alone, the second question gets no number.)
turns='Remember the number 417.\nWhat number did I ask you to remember?\n/quit\n'
remote=$(printf "$turns" | "$bin" chat --temperature 0 --repetition-penalty 1 --max-new-tokens 24 \
  --initial_peers "$peers" 2>/dev/null)
check "chat through the swarm keeps the conversation" "417" "$(echo "$remote" | tail -n +2)"
for pid in "${pids[@]}"; do kill "$pid"; done
wait
rm -rf "$dir"
[ $fail = 0 ] && echo "all checks passed"
exit $fail
