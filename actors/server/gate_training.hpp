// The span gate's side of training requests (forward_request, backward_request; the handlers are in
// gate_training.cpp, declared in gate_state.hpp): which block actors a request runs, checked against the server's
// span, and the chained message that runs them.
#pragma once

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <string>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/server/block_messages.hpp"
#include "actors/server/span_gate.hpp"

namespace corolla {

// The block actors of [first_block, last_block) (0, 0: the whole span), after checking that the span serves them
// that `prompts` fit them and `hidden`, and that the server holds the adapter. Errors are unknown_block or bad_request
// with a readable message.
caf::expected<std::vector<block_actor_handle>> training_chain(const gate_options& opt,
                                                              const std::vector<block_actor_handle>& blocks,
                                                              int64_t first_block, int64_t last_block,
                                                              const Tensor& hidden, const Tensor& prompts,
                                                              const std::string& adapter);

// "" when the server holds the adapter a request names (or none is named), else a message saying which it has.
std::string check_adapter(const gate_options& opt, const std::string& adapter);

// The message that runs `chain` forward (and back, with `grad` set) over working copies of the request's tensors
// on `backend`.
block_train_msg training_message(Backend& backend, std::vector<block_actor_handle> chain, const Tensor& hidden,
                                 std::vector<int32_t> positions, const Tensor& prompts, std::string adapter,
                                 const Tensor* grad = nullptr);

}  // namespace corolla
