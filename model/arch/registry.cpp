#include "model/arch/registry.hpp"

#include <map>
#include <stdexcept>

namespace corolla {

const BlockFactory* find_block_factory(const std::string& arch) {
  // Mistral's block is Llama's with a sliding window on every layer.
  static const std::map<std::string, BlockFactory> factories = {
      {"bloom", make_bloom_block}, {"falcon", make_falcon_block},   {"gemma2", make_gemma2_block},
      {"llama", make_llama_block}, {"mistral", make_llama_block},   {"qwen2", make_qwen2_block},
      {"qwen3", make_qwen3_block}, {"mixtral", make_mixtral_block}, {"phi3", make_phi3_block},
  };
  auto it = factories.find(arch);
  return it == factories.end() ? nullptr : &it->second;
}

std::unique_ptr<Block> load_block(const WeightSource& source, int64_t index, Backend& backend,
                                  const BlockLoadOptions& options) {
  const ModelConfig& c = source.config();
  if (index < 0 || index >= c.num_layers)
    throw std::out_of_range(source.origin() + ": block " + std::to_string(index) + " does not exist (the model has " +
                            std::to_string(c.num_layers) + " blocks)");
  const BlockFactory* make = find_block_factory(c.arch);
  if (!make) throw std::runtime_error(source.origin() + ": unsupported architecture '" + c.arch + "'");
  return (*make)(source, index, backend, options);
}

int64_t kv_bytes_per_token(const ModelConfig& c) { return 2 * c.num_kv_heads * c.head_dim * 4; }

}  // namespace corolla
