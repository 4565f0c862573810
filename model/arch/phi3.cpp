// Phi-3: the Llama block with q/k/v stored as one qkv_proj [q + 2·kv, d] and gate/up as one gate_up_proj
// [2·ff, d] (gate rows first), used as row views with nothing copied, and a sliding window on every layer when the
// config sets one (Phi-3-mini-4k: 2047); longrope scaling (the 128k variants) and RoPE over part of each head
// (Phi-4-mini) through the Llama block's RoPE.
#include "model/arch/registry.hpp"

namespace corolla {

std::unique_ptr<Block> make_phi3_block(const WeightSource& src, int64_t index, Backend& backend,
                                       const BlockLoadOptions& opt) {
  if (!src.config().fused_projections)
    throw std::runtime_error(src.origin() + ": a phi3 model stores its projections fused");
  return make_llama_block(src, index, backend, opt);
}

}  // namespace corolla
