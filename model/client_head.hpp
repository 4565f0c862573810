// What a client keeps of a model: the token embeddings (with BLOOM, and their LayerNorm; with Gemma 2, scaled by
// √hidden), the final norm and the LM head (tied to the embeddings when the model says so; with Gemma 2, its logits
// soft-capped). Everything between runs on servers (or, locally, in LocalModel).
#pragma once

#include <memory>
#include <optional>
#include <span>

#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

class ClientHead {
 public:
  ClientHead(const WeightSource& source, Backend& backend, std::optional<DType> dtype = std::nullopt);

  const ModelConfig& config() const { return config_; }
  // Hidden states [batch, ids.size() / batch, hidden] on the backend: what the first block takes. Throws on ids
  // outside the vocabulary.
  Tensor embed(std::span<const int32_t> ids, int64_t batch) const;
  // The final norm (RMSNorm, or LayerNorm with its bias) of x [rows, hidden] into y, and its gradient: dx from dy.
  void final_norm(const Tensor& x, Tensor& y) const;
  void final_norm_backward(const Tensor& x, const Tensor& dy, Tensor& dx) const;
  // Logits [rows, vocab] on the host for hidden [rows, hidden] (any leading shape; the last dim is hidden), which
  // may be on the host or on the backend.
  Tensor logits(const Tensor& hidden) const;
  // The final soft cap (Gemma 2's final_logit_softcapping) on n logits on the host, in place: cap · tanh(x / cap),
  // as Hugging Face computes it in f32; with `derivative`, its derivative at each (1 − tanh²(x / cap)) goes there.
  // Nothing without a cap (the derivative is then 1).
  void cap_logits(float* logits, int64_t n, float* derivative = nullptr) const;

  // The head's tensors on the backend, for training (gradients flow back through the final norm and the head).
  Backend& backend() const { return backend_; }
  const Tensor& embeddings() const { return embeddings_; }
  const Tensor& lm_head_weight() const { return lm_head_; }

 private:
  Backend& backend_;
  ModelConfig config_;
  Tensor embeddings_, norm_, norm_bias_, lm_head_;
  float embedding_scale_ = 1.0f;                 // Gemma's √hidden, in f32
  Tensor embedding_norm_, embedding_norm_bias_;  // BLOOM's word_embeddings_layernorm
};

}  // namespace corolla
