// A WeightSource of a model shape alone: every tensor a Llama-architecture block (or Mixtral's, with experts) and the
// client head ask for,
// with the right name, dtype and shape, as a virtual tensor (sim/virtual_tensor.hpp). Servers "load" blocks of
// any size from it at no cost in time or memory; the real loading code runs (names, shape checks, block actors).
#pragma once

#include <memory>
#include <string>

#include "model/weights/weight_source.hpp"

namespace corolla::sim {

class SyntheticWeights final : public WeightSource {
 public:
  // `weight_dtype`: the matrices' dtype (norms and the router are f32). The config must be a Llama-architecture
  // shape, or Mixtral's.
  SyntheticWeights(ModelConfig config, DType weight_dtype, std::string name);

  const ModelConfig& config() const override { return config_; }
  bool has(const std::string& name) const override;
  Tensor get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return name_; }
  TensorMeta meta(const std::string& name) const override;

 private:
  // Dtype and shape of a tensor of this model, or false when it has none of that name.
  bool lookup(const std::string& name, TensorMeta& out) const;
  // The same for a suffix under block_sparse_moe. of a block of a mixture of experts.
  bool lookup_expert(const std::string& suffix, TensorMeta& out) const;

  ModelConfig config_;
  DType weight_dtype_;
  std::string name_;
};

}  // namespace corolla::sim
