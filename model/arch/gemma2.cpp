// Gemma 2: the Llama block (model/arch/llama.cpp) with what its config sets for it: post-norms after attention and
// after the MLP, RMSNorms of 1 + weight, a GeGLU MLP (the tanh GELU), scores scaled by query_pre_attn_scalar^-0.5
// and soft-capped by attn_logit_softcapping, and a sliding window on the layers layer_types marks (the even ones by
// default). The client head scales its embeddings by √hidden and soft-caps the logits (model/client_head.cpp).
#include "model/arch/registry.hpp"

namespace corolla {

std::unique_ptr<Block> make_gemma2_block(const WeightSource& src, int64_t index, Backend& backend,
                                         const BlockLoadOptions& opt) {
  const ModelConfig& c = src.config();
  if (!c.post_norms || !c.norm_plus_one || c.hidden_act == "silu")
    throw std::runtime_error(src.origin() + ": a gemma2 model has post-norms, norms of 1 + weight and a GELU MLP");
  return make_llama_block(src, index, backend, opt);
}

}  // namespace corolla
