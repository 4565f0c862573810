// One block actor's share of a training request (block_train_msg, actors/server/block_messages.hpp): the stateless
// forward on the way up the chain, the backward on the way down.
#pragma once

#include <caf/local_actor.hpp>
#include <caf/result.hpp>

#include "actors/server/block_messages.hpp"
#include "model/block.hpp"

namespace corolla {

// Runs this block's part of `m`, then passes `m` to the next block of the chain (by delegation, so the last one
// answers the gate directly) or answers with the result. Bad shapes are bad_request errors, never a crash.
// `lora`: this block's pairs of the adapter the request names (nullptr for none).
caf::result<block_train_result> block_train_step(caf::local_actor* self, Block& block, const BlockLora* lora,
                                                 block_train_msg& m);

}  // namespace corolla
