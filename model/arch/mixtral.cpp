// Mixtral: Mistral's block (sliding window on every layer when configured) with a mixture of SwiGLU experts in
// place of the MLP: a router sends each token to num_experts_per_tok of num_local_experts (model/arch/sparse_moe.hpp).
// A server hosting the block hosts all its experts.
#include "model/arch/registry.hpp"

namespace corolla {

std::unique_ptr<Block> make_mixtral_block(const WeightSource& src, int64_t index, Backend& backend,
                                          const BlockLoadOptions& opt) {
  if (src.config().num_experts <= 0) throw std::runtime_error(src.origin() + ": a mixtral model must have experts");
  return make_llama_block(src, index, backend, opt);
}

}  // namespace corolla
