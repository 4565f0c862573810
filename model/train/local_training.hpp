// Training with every block in this process: what `corolla finetune` does without a swarm, and the reference the
// swarm's training is checked against.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/block.hpp"
#include "model/train/prompt_tuning.hpp"

namespace corolla {

class LocalBlocks {
 public:
  LocalBlocks(const WeightSource& source, Backend& backend, std::optional<DType> dtype = std::nullopt);
  std::span<Block* const> blocks() const { return ptrs_; }
  Backend& backend() const { return backend_; }

 private:
  Backend& backend_;
  std::vector<std::unique_ptr<Block>> owned_;
  std::vector<Block*> ptrs_;
};

// One step: forward through the blocks, the loss, backward, one Adam update. Returns the loss (before the update).
double local_train_step(PromptTuning& tuning, const LocalBlocks& blocks, const TrainingBatch& batch);

}  // namespace corolla
