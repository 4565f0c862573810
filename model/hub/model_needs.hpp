// Which of a model's files and tensors a process needs: a server only its span of blocks, a client of a swarm only
// the tensors outside the blocks (embeddings, final norm, LM head) and the tokenizer, a local run everything.
// A model fetched by name downloads no more than this.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace corolla::hub {

struct ModelNeeds {
  bool weights = true;      // false: the config (and tokenizer) only
  bool tokenizer = true;    // tokenizer.json, tokenizer_config.json, generation_config.json
  bool head = true;         // tensors outside the blocks
  int64_t first_block = 0;  // blocks [first_block, last_block); last_block < 0: every block from first_block
  int64_t last_block = -1;

  static ModelNeeds everything() { return {}; }
  // A client of a swarm: tokenizer and the tensors outside the blocks.
  static ModelNeeds client_head() { return {true, true, true, 0, 0}; }
  // A server: the blocks [first, last) (last < 0: all of them).
  static ModelNeeds blocks(int64_t first, int64_t last) { return {true, false, false, first, last}; }
  static ModelNeeds tokenizer_only() { return {false, true, false, 0, 0}; }

  // Whether a tensor (its name in a safetensors file) is needed.
  bool wants(std::string_view tensor_name) const;
  // A folder name that tells these needs apart ("all", "head", "blocks-0-8", "tokenizer").
  std::string label() const;
};

}  // namespace corolla::hub
