// Qwen3: the Llama block with an RMSNorm over each head's query and key before RoPE (q_norm, k_norm: one weight
// of head_dim values each, shared by the heads), no q/k/v biases unless attention_bias says so (then o_proj has one
// too), and Qwen2's sliding-window layers; all of it comes from the config.
#include "model/arch/registry.hpp"

namespace corolla {

std::unique_ptr<Block> make_qwen3_block(const WeightSource& src, int64_t index, Backend& backend,
                                        const BlockLoadOptions& opt) {
  if (!src.config().qk_norm) throw std::runtime_error(src.origin() + ": a qwen3 model must have q/k norms");
  return make_llama_block(src, index, backend, opt);
}

}  // namespace corolla
