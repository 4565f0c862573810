#!/usr/bin/env bash
# `corolla config-check --node` checks the span against the model as `serve` does (one rule, ModelConfig::
# span_problem): a range beyond the committed 4-block test model is refused by both with the same message; a
# model that cannot be found is said to be unchecked rather than passed silently.
set -u
bin="$1"
models="$2"
fail=0
check() {  # check NAME EXPECTED_SUBSTRING ACTUAL
  if [[ "$3" == *"$2"* ]]; then echo "ok: $1"; else echo "FAILED: $1: expected '$2' in: $3"; fail=1; fi
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
node_file() {  # node_file MODEL RANGE
  printf 'model = "%s"\nblock_indices = "%s"\nnew_swarm = true\ndata_dir = "%s/data"\n' "$1" "$2" "$dir" > "$dir/node.toml"
}

node_file "$models/llama" "0:100000"
out=$("$bin" config-check --node "$dir/node.toml" 2>&1); rc=$?
check "config-check refuses a span beyond the model" "blocks 0:100000 are not a span of the model's 4 blocks" "$out"
[ "$rc" -ne 0 ] || { echo "FAILED: config-check exited 0 for 0:100000"; fail=1; }
out=$(timeout 60 "$bin" serve --config "$dir/node.toml" 2>&1); rc=$?
check "serve refuses the same span" "blocks 0:100000 are not a span of the model's 4 blocks" "$out"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAILED: serve exited $rc for 0:100000"; fail=1; }

node_file "$models/llama/model-q8_0.gguf" "2:5"
out=$("$bin" config-check --node "$dir/node.toml" 2>&1)
check "config-check reads a GGUF model's block count" "blocks 2:5 are not a span of the model's 4 blocks" "$out"

node_file "$models/llama" "1:4"
out=$("$bin" config-check --node "$dir/node.toml" 2>&1); rc=$?
check "config-check accepts a span of the model" "valid" "$out"
[ "$rc" -eq 0 ] || { echo "FAILED: config-check refused 1:4 ($out)"; fail=1; }

node_file "$dir/no-such-model" "0:100000"
out=$("$bin" config-check --node "$dir/node.toml" 2>&1); rc=$?
check "config-check says when it cannot check the span" "not checked" "$out"
exit $fail
