// Qwen2: the Llama block with biases on the q, k and v projections (and its own RoPE base, norm epsilon and
// sliding-window layers, which come from the config).
#include "model/arch/registry.hpp"

namespace corolla {

std::unique_ptr<Block> make_qwen2_block(const WeightSource& src, int64_t index, Backend& backend,
                                        const BlockLoadOptions& opt) {
  if (!src.config().qkv_bias) throw std::runtime_error(src.origin() + ": a qwen2 model must have q/k/v biases");
  return make_llama_block(src, index, backend, opt);
}

}  // namespace corolla
