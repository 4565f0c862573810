// LoRA adapters in Hugging Face PEFT's format: a directory with adapter_config.json and adapter_model.safetensors.
//
// A targeted projection y = x·Wᵀ becomes y = x·Wᵀ + scale · (x·Aᵀ)·Bᵀ with A [r, in], B [out, r] and
// scale = lora_alpha / r (lora_alpha / √r with use_rslora), as PEFT computes it (dropout is off at inference).
// The Llama-family projections can be targeted: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.
// What Corolla does not implement is refused with an error naming it (DoRA, biases, rank or alpha patterns,
// fan_in_fan_out, modules_to_save, other modules).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "model/config.hpp"

namespace corolla {

enum class Projection : uint8_t { q, k, v, o, gate, up, down };
inline constexpr size_t kProjections = 7;

// One projection's pair: a [r, in] and b [out, r] already multiplied by the scale, f32 on the backend.
struct LoraPair {
  Tensor a, b;
};

// An adapter's pairs for one block; a projection it does not target has none.
struct BlockLora {
  std::array<LoraPair, kProjections> pairs;
  const LoraPair* get(Projection p) const {
    const LoraPair& x = pairs[static_cast<size_t>(p)];
    return x.a.defined() ? &x : nullptr;
  }
};

// What requests call the adapter in `dir`: the directory's name ("adapters/my-lora/" -> "my-lora").
std::string adapter_name(const std::string& dir);

class LoraAdapter {
 public:
  // Reads the adapter in `dir` for blocks [first_block, last_block) of a model with `config` onto `backend`.
  // Throws std::runtime_error naming the file and the problem.
  static std::shared_ptr<const LoraAdapter> load(const std::string& dir, const ModelConfig& config, int64_t first_block,
                                                 int64_t last_block, Backend& backend);

  // What requests call it: the directory's name.
  const std::string& name() const { return name_; }
  int64_t rank() const { return rank_; }
  float scale() const { return scale_; }
  // The block's pairs, or nullptr when the adapter leaves the block (or a block outside the loaded span) alone.
  const BlockLora* block(int64_t index) const;

 private:
  std::string name_;
  int64_t rank_ = 0;
  float scale_ = 1;
  int64_t first_block_ = 0;
  std::vector<BlockLora> blocks_;  // [first_block, last_block)
  std::vector<bool> touched_;
};

}  // namespace corolla
