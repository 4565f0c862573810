// A WeightSource over tensors already in memory (for example a block's converted weights read back from a
// weights cache, or weights built by a test or benchmark).
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "model/weights/weight_source.hpp"

namespace corolla {

class TensorMapSource final : public WeightSource {
 public:
  TensorMapSource(ModelConfig config, std::map<std::string, Tensor> tensors, std::string origin)
      : config_(std::move(config)), tensors_(std::move(tensors)), origin_(std::move(origin)) {}

  const ModelConfig& config() const override { return config_; }
  bool has(const std::string& name) const override { return tensors_.count(name) != 0; }
  Tensor get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(origin_ + ": tensor '" + name + "' is missing");
    count(it->second);
    return it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors_) out.push_back(name);
    return out;
  }
  std::string origin() const override { return origin_; }
  TensorMeta meta(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(origin_ + ": tensor '" + name + "' is missing");
    return {it->second.dtype(), it->second.shape()};
  }

 private:
  ModelConfig config_;
  std::map<std::string, Tensor> tensors_;
  std::string origin_;
};

}  // namespace corolla
