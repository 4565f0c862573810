// Where a BLOOM checkpoint keeps its tensors: h.N.…, word_embeddings…, ln_f… as BloomModel saves them (the
// bigscience repositories), or the same under "transformer." as BloomForCausalLM saves them. Falcon's checkpoints
// (FalconModel, FalconForCausalLM) name theirs the same way.
#pragma once

#include <cstdint>
#include <string>

#include "model/weights/weight_source.hpp"

namespace corolla {

class BloomNames {
 public:
  // Reads which form `src` uses from whether it holds `probe` (a name without the prefix) under the prefix.
  BloomNames(const WeightSource& src, const std::string& probe)
      : prefix_(src.has("transformer." + probe) ? "transformer." : "") {}
  std::string operator()(const std::string& name) const { return prefix_ + name; }
  std::string block(int64_t index, const std::string& suffix) const { return prefix_ + block_name(index, suffix); }
  static std::string block_name(int64_t index, const std::string& suffix) {
    return "h." + std::to_string(index) + "." + suffix;
  }

 private:
  std::string prefix_;
};

}  // namespace corolla
