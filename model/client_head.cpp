#include "model/client_head.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/arch/bloom_names.hpp"
#include "model/weights/load_weight.hpp"

namespace corolla {
namespace {

// The head's tensors as the architecture's checkpoints name them (norm_bias: BLOOM and Falcon; the embedding norm:
// BLOOM only).
struct HeadNames {
  std::string embeddings, norm, norm_bias, embedding_norm, embedding_norm_bias;
};

HeadNames head_names(const WeightSource& src) {
  if (src.config().arch == "bloom") {
    const BloomNames n(src, "word_embeddings.weight");
    return {n("word_embeddings.weight"), n("ln_f.weight"), n("ln_f.bias"), n("word_embeddings_layernorm.weight"),
            n("word_embeddings_layernorm.bias")};
  }
  if (src.config().arch == "falcon") {  // BLOOM's names, without the embeddings' LayerNorm
    const BloomNames n(src, "word_embeddings.weight");
    return {n("word_embeddings.weight"), n("ln_f.weight"), n("ln_f.bias"), "", ""};
  }
  return {"model.embed_tokens.weight", "model.norm.weight", "", "", ""};
}

}  // namespace

ClientHead::ClientHead(const WeightSource& src, Backend& backend, std::optional<DType> dtype)
    : backend_(backend), config_(src.config()) {
  const int64_t v = config_.vocab_size, d = config_.hidden_size;
  const HeadNames names = head_names(src);
  // Tied, the table is the LM head too, so it is placed for matrix products; else it is only read by rows.
  embeddings_ = config_.tie_word_embeddings ? load_matrix(src, names.embeddings, {v, d}, dtype, backend)
                                            : load_table(src, names.embeddings, {v, d}, dtype, backend);
  norm_ = config_.norm_plus_one ? load_norm_plus_one(src, names.norm, d, backend).plus_one
                                : load_vector(src, names.norm, d, backend);
  if (config_.scale_embeddings) embedding_scale_ = static_cast<float>(std::sqrt(static_cast<double>(d)));
  if (config_.layer_norm) norm_bias_ = load_vector(src, names.norm_bias, d, backend);
  if (config_.embedding_norm) {
    embedding_norm_ = load_vector(src, names.embedding_norm, d, backend);
    embedding_norm_bias_ = load_vector(src, names.embedding_norm_bias, d, backend);
  }
  if (!config_.tie_word_embeddings && src.has("lm_head.weight"))
    lm_head_ = load_matrix(src, "lm_head.weight", {v, d}, dtype, backend);
  else if (!config_.tie_word_embeddings)
    throw std::runtime_error(src.origin() + ": tensor 'lm_head.weight' is missing and embeddings are not tied");
  else
    lm_head_ = embeddings_;
}

Tensor ClientHead::embed(std::span<const int32_t> ids, int64_t batch) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (batch <= 0 || n % batch != 0)
    throw std::invalid_argument(std::to_string(n) + " token ids do not split into a batch of " + std::to_string(batch));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= config_.vocab_size)
      throw std::invalid_argument("token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                  " is outside the vocabulary of " + std::to_string(config_.vocab_size));
  Tensor out = backend_.alloc(DType::f32, {batch, n / batch, config_.hidden_size});
  backend_.embed(embeddings_, ids, embedding_scale_, out);
  if (!embedding_norm_.defined()) return out;
  Tensor normed = backend_.alloc(DType::f32, out.shape());
  backend_.layer_norm(out, embedding_norm_, embedding_norm_bias_, static_cast<float>(config_.norm_eps), normed);
  return normed;
}

void ClientHead::final_norm(const Tensor& x, Tensor& y) const {
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.layer_norm)
    backend_.layer_norm(x, norm_, norm_bias_, eps, y);
  else
    backend_.rms_norm(x, norm_, eps, y);
}

void ClientHead::final_norm_backward(const Tensor& x, const Tensor& dy, Tensor& dx) const {
  const float eps = static_cast<float>(config_.norm_eps);
  if (config_.layer_norm)
    backend_.layer_norm_backward(x, norm_, eps, dy, dx);
  else
    backend_.rms_norm_backward(x, norm_, eps, dy, dx);
}

Tensor ClientHead::logits(const Tensor& hidden) const {
  const int64_t d = config_.hidden_size;
  if (hidden.dim(-1) != d)
    throw std::invalid_argument("hidden states " + hidden.describe() + " do not end in the model's hidden size " +
                                std::to_string(d));
  const int64_t rows = hidden.numel() / d;
  // A swarm client's hidden states arrive from the network on the host; its head may sit on a GPU.
  Tensor x =
      hidden.device() == backend_.device() ? hidden.reshaped({rows, d}) : backend_.upload(hidden.reshaped({rows, d}));
  Tensor n = backend_.alloc(DType::f32, {rows, d});
  Tensor out = backend_.alloc(DType::f32, {rows, config_.vocab_size});
  final_norm(x, n);
  backend_.matmul(n, lm_head_, nullptr, out);
  Tensor host = backend_.download(out);
  cap_logits(host.data_as<float>(), host.numel());
  return host;
}

void ClientHead::cap_logits(float* logits, int64_t n, float* derivative) const {
  const float cap = static_cast<float>(config_.final_softcap);
  if (cap <= 0) {
    if (derivative) std::fill(derivative, derivative + n, 1.0f);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(logits[i] / cap);
    logits[i] = t * cap;
    if (derivative) derivative[i] = 1.0f - t * t;
  }
}

}  // namespace corolla
