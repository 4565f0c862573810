#include "model/train/local_training.hpp"

#include "model/train/span_training.hpp"

namespace corolla {

LocalBlocks::LocalBlocks(const WeightSource& source, Backend& backend, std::optional<DType> dtype) : backend_(backend) {
  for (int64_t i = 0; i < source.config().num_layers; ++i) {
    owned_.push_back(load_block(source, i, backend, {dtype}));
    ptrs_.push_back(owned_.back().get());
  }
}

double local_train_step(PromptTuning& tuning, const LocalBlocks& blocks, const TrainingBatch& batch) {
  const BlockInputs in = tuning.inputs(batch);
  const Tensor out = span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, blocks.backend());
  const HeadLoss head = tuning.loss(batch, out);
  const SpanGradients grads =
      span_backward(blocks.blocks(), in.hidden, head.grad, in.positions, in.prompts, blocks.backend());
  tuning.accumulate(batch, grads.grad_in, grads.grad_prompts);
  tuning.apply();
  return head.loss;
}

}  // namespace corolla
