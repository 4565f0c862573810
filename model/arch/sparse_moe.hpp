// The mixture-of-experts feed-forward of a Mixtral block, in place of the dense MLP:
//
//   p = softmax(n · Wrᵀ)                       router probabilities over the E experts, per token
//   top = the k largest p,  w = p[top] / Σ p[top]
//   y = Σ_(e in top) w_e · down_e(silu(gate_e(n)) · up_e(n))
//
// Tokens are grouped by expert: each chosen expert runs once over the rows routed to it (gathered, multiplied,
// scattered back with the router's weights), so a decode step reads the weights of its k experts only. The
// routing is decided on the host from the router's logits (E values per token). Weights keep Mixtral's Hugging
// Face names (block_sparse_moe.gate, block_sparse_moe.experts.E.w1 / w3 / w2 for gate / up / down).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

class SparseMoe {
 public:
  // Loads block `index`'s router (kept in f32: the choice of experts should not move with the serving dtype) and
  // experts (in `dtype`, or as stored).
  SparseMoe(const WeightSource& src, int64_t index, Backend& backend, std::optional<DType> dtype);

  // The mixture's output [m, D] for n [m, D].
  Tensor forward(const Tensor& n);
  // The gradient [m, D] with respect to n of the mixture at n, given that of its output dy [m, D]: through the
  // experts and through the router's weights (the choice itself is piecewise constant). Weights stay frozen.
  Tensor backward(const Tensor& n, const Tensor& dy);

  int64_t weight_bytes() const;
  // Hugging Face names and tensors, as loaded.
  std::vector<std::pair<std::string, Tensor>> named_weights() const;

 private:
  struct Expert {
    Tensor gate, up, down;  // w1 [F, D], w3 [F, D], w2 [D, F]
  };
  // Which rows go to which expert, and with what weight.
  struct Routing {
    int64_t rows = 0;
    std::vector<float> probs;                     // [rows, E] softmax of the router's logits
    std::vector<int32_t> chosen;                  // [rows, k] expert ids, largest probability first
    std::vector<float> weights;                   // [rows, k] renormalized probabilities
    std::vector<std::vector<int32_t>> by_expert;  // per expert: the rows routed to it
    std::vector<std::vector<float>> weight_of;    // per expert: those rows' weights
    std::vector<std::vector<int32_t>> slot_of;    // per expert: which of the row's k choices it is
  };
  Routing route(const Tensor& n);

  Backend& backend_;
  int64_t index_, experts_per_token_, hidden_, intermediate_;
  Tensor router_;  // [E, D] f32
  std::vector<Expert> experts_;
};

}  // namespace corolla
