#include "model/train/span_training.hpp"

#include <cstring>
#include <stdexcept>
#include <vector>

namespace corolla {
namespace {

void require(const std::string& problem) {
  if (!problem.empty()) throw std::invalid_argument(problem);
}

}  // namespace

Tensor working_copy(Backend& backend, const Tensor& host) {
  return backend.device() == Device::cpu ? host.clone() : backend.upload(host);
}

// Added to a zero-filled tensor, so it never leaves the device.
Tensor device_copy(Backend& backend, const Tensor& t) {
  Tensor out = backend.alloc(DType::f32, t.shape());
  backend.add(out, t, out);
  return out;
}

std::string check_prompts(const Tensor& prompts, const Tensor& hidden, int64_t n_blocks) {
  if (!has_prompts(prompts)) return {};
  if (prompts.dtype() != DType::f32 || prompts.rank() != 4)
    return "prompts must be f32[blocks, batch, prompt_len, hidden], got " + prompts.describe();
  if (prompts.dim(0) != n_blocks)
    return "prompts for " + std::to_string(prompts.dim(0)) + " blocks, but the request runs " +
           std::to_string(n_blocks);
  if (prompts.dim(1) != hidden.dim(0) || prompts.dim(3) != hidden.dim(2))
    return "prompts " + prompts.describe() + " do not match the hidden states " + hidden.describe() +
           " (batch and hidden size must agree)";
  if (prompts.dim(2) > hidden.dim(1))
    return "prompts of length " + std::to_string(prompts.dim(2)) + " are longer than the " +
           std::to_string(hidden.dim(1)) + " tokens they apply to";
  return {};
}

void add_block_prompts(Backend& backend, Tensor& hidden, const Tensor& prompts, int64_t i) {
  const int64_t b = hidden.dim(0), t = hidden.dim(1), d = hidden.dim(2), p = prompts.dim(2);
  if (p == 0) return;
  Tensor mine = backend.upload(prompts.slice_rows(i, i + 1).reshaped({b * p, d}));
  Tensor rows = hidden.reshaped({b * t, d});
  for (int64_t s = 0; s < b; ++s) {
    Tensor dst = rows.slice_rows(s * t, s * t + p);
    backend.add(dst, mine.slice_rows(s * p, (s + 1) * p), dst);
  }
}

void add_prompts_at_positions(Backend& backend, Tensor& hidden, const Tensor& prompts,
                              std::span<const int32_t> positions) {
  const int64_t b = hidden.dim(0), t = hidden.dim(1), d = hidden.dim(2), p = prompts.dim(1);
  if (prompts.dim(0) != b || prompts.dim(2) != d || static_cast<int64_t>(positions.size()) != b * t)
    throw std::invalid_argument("prompts " + prompts.describe() + " do not fit hidden states " + hidden.describe());
  Tensor rows = hidden.reshaped({b * t, d});
  const Tensor all = prompts.reshaped({b * p, d});
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i < t;) {  // runs of consecutive positions below P: one add each
      const int64_t pos = positions[static_cast<size_t>(s * t + i)];
      if (pos < 0 || pos >= p) {
        ++i;
        continue;
      }
      int64_t n = 1;
      while (i + n < t && pos + n < p && positions[static_cast<size_t>(s * t + i + n)] == pos + n) ++n;
      Tensor dst = rows.slice_rows(s * t + i, s * t + i + n);
      backend.add(dst, backend.upload(all.slice_rows(s * p + pos, s * p + pos + n)), dst);
      i += n;
    }
}

void store_prompt_grad(Backend& backend, const Tensor& grad, Tensor& prompt_grads, int64_t i) {
  const int64_t b = grad.dim(0), t = grad.dim(1), d = grad.dim(2), p = prompt_grads.dim(2);
  const Tensor host = backend.download(grad);
  float* dst = prompt_grads.data_as<float>() + i * b * p * d;
  for (int64_t s = 0; s < b; ++s)
    std::memcpy(dst + s * p * d, host.data_as<const float>() + s * t * d, static_cast<size_t>(p * d) * 4);
}

const BlockLora* lora_of(const LoraAdapter* adapter, const Block& block) {
  return adapter ? adapter->block(block.index()) : nullptr;
}

Tensor span_forward(std::span<Block* const> blocks, const Tensor& hidden, std::span<const int32_t> positions,
                    const Tensor& prompts, Backend& backend, const LoraAdapter* adapter) {
  require(check_prompts(prompts, hidden, static_cast<int64_t>(blocks.size())));
  Tensor h = working_copy(backend, hidden);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (has_prompts(prompts)) add_block_prompts(backend, h, prompts, static_cast<int64_t>(i));
    blocks[i]->forward(h, positions, nullptr, lora_of(adapter, *blocks[i]));
  }
  return backend.download(h);
}

SpanGradients span_backward(std::span<Block* const> blocks, const Tensor& hidden, const Tensor& grad_out,
                            std::span<const int32_t> positions, const Tensor& prompts, Backend& backend,
                            const LoraAdapter* adapter) {
  const int64_t n = static_cast<int64_t>(blocks.size());
  require(check_prompts(prompts, hidden, n));
  if (grad_out.shape() != hidden.shape() || grad_out.dtype() != DType::f32)
    throw std::invalid_argument("the output gradient " + grad_out.describe() + " does not match the hidden states " +
                                hidden.describe());
  // Inputs of every block (after its prompts), recomputed.
  std::vector<Tensor> inputs;
  Tensor h = working_copy(backend, hidden);
  for (int64_t i = 0; i < n; ++i) {
    if (has_prompts(prompts)) add_block_prompts(backend, h, prompts, i);
    inputs.push_back(h);
    if (i + 1 < n) {
      h = device_copy(backend, h);
      blocks[static_cast<size_t>(i)]->forward(h, positions, nullptr, lora_of(adapter, *blocks[static_cast<size_t>(i)]));
    }
  }
  SpanGradients out;
  if (has_prompts(prompts)) out.grad_prompts = Tensor::empty(DType::f32, prompts.shape());
  Tensor grad = working_copy(backend, grad_out);
  for (int64_t i = n - 1; i >= 0; --i) {
    Block& block = *blocks[static_cast<size_t>(i)];
    block.backward(inputs[static_cast<size_t>(i)], positions, grad, lora_of(adapter, block));
    if (has_prompts(prompts)) store_prompt_grad(backend, grad, out.grad_prompts, i);
  }
  out.grad_in = backend.download(grad);
  return out;
}

}  // namespace corolla
