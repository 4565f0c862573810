// Training through a run of consecutive blocks (a server's span, or every block of a local model): the stateless
// forward and backward with deep prompts, as Petals defines them.
//
// Deep prompts: prompts [n_blocks, B, P, D] (P ≤ T). Before block i runs, prompts[i] is added to the first P
// positions of every sequence: hidden[:, :P] += prompts[i]. So the gradient of prompts[i] is the gradient of
// block i's input at those positions. An undefined (empty) prompts tensor means none.
//
// The backward recomputes the forward (inputs of every block but the last), then runs the blocks' backward in
// reverse: nothing is kept between a forward and its backward.
#pragma once

#include <span>
#include <string>

#include "model/block.hpp"

namespace corolla {

struct SpanGradients {
  Tensor grad_in;       // [B, T, D], host
  Tensor grad_prompts;  // [n_blocks, B, P, D], host; undefined without prompts
};

// A message naming what is wrong with `prompts` for hidden states [B, T, D] through n_blocks blocks ("" if fine).
std::string check_prompts(const Tensor& prompts, const Tensor& hidden, int64_t n_blocks);
// True when `prompts` holds prompts (an empty tensor means none).
inline bool has_prompts(const Tensor& prompts) { return prompts.defined() && prompts.numel() > 0; }

// hidden[:, :P] += prompts[i] (hidden on the backend, prompts on the host).
void add_block_prompts(Backend& backend, Tensor& hidden, const Tensor& prompts, int64_t i);
// Deep prompts in a step with a KV cache (inference): hidden [B, T, D] on the backend holds tokens at `positions`
// (B·T, consecutive within each sequence); a token at position p < P gets prompts[b, p] added (prompts [B, P, D],
// host). Steps past the first P positions are left alone, so a prefill split into steps, or replayed, gets the
// same prompts as one prefill.
void add_prompts_at_positions(Backend& backend, Tensor& hidden, const Tensor& prompts,
                              std::span<const int32_t> positions);
// grad[:, :P] of grad [B, T, D] on the backend, written into prompt_grads[i] (host [n, B, P, D]).
void store_prompt_grad(Backend& backend, const Tensor& grad, Tensor& prompt_grads, int64_t i);

// A private copy of a host tensor on the backend (blocks and backward transform their arguments in place).
Tensor working_copy(Backend& backend, const Tensor& host);
// A copy of a tensor already on the backend, made on the device.
Tensor device_copy(Backend& backend, const Tensor& t);

// hidden [B, T, D] (host) through `blocks` in order, with prompts (and a LoRA adapter); returns the output on the
// host.
Tensor span_forward(std::span<Block* const> blocks, const Tensor& hidden, std::span<const int32_t> positions,
                    const Tensor& prompts, Backend& backend, const LoraAdapter* adapter = nullptr);
// The gradients of span_forward's input and prompts, given the gradient of its output (all host tensors).
SpanGradients span_backward(std::span<Block* const> blocks, const Tensor& hidden, const Tensor& grad_out,
                            std::span<const int32_t> positions, const Tensor& prompts, Backend& backend,
                            const LoraAdapter* adapter = nullptr);

}  // namespace corolla
