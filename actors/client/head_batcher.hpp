// The LM head of a swarm client's sessions as one actor: the last hidden rows of sessions that ask at the same
// time go through the final norm and the head as one matrix product, so the head's weights (the largest single
// matrix of most models: vocabulary × hidden) are read once for all of them instead of once per session. With
// continuous batching the servers answer the steps of concurrent sessions together, so their rows arrive close
// together: a request from one of the last product's sessions waits up to 2 ms for the others of them (a session
// alone never waits), and the product runs as soon as they are all in.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <memory>

#include "kernels/tensor.hpp"
#include "model/client_head.hpp"

namespace corolla {

// Session -> head batcher: hidden [rows, hidden] f32 on the host; the reply is its logits [rows, vocab] (host).
struct head_rows {
  Tensor hidden;
};

caf::actor spawn_head_batcher(caf::actor_system& sys, std::shared_ptr<const ClientHead> head);

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::head_rows)
