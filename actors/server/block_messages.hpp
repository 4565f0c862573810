// A hosted block's actor as a typed interface, and its messages (from the gate, and from block to block along a
// step's or a training request's chain). In-process only: CAF is told they never cross processes.
#pragma once

#include <caf/actor_clock.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/error.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

struct block_open_msg;
struct block_close_msg;
struct block_batch_msg;
struct block_train_msg;
struct block_train_result;

// A block actor (actors/server/block_actor.hpp): the gate opens and closes sessions' caches in it and sends it
// batches of steps and training requests, which it passes on to the next block of their chain.
using block_actor_handle = caf::typed_actor<caf::reacts_to<block_open_msg>, caf::reacts_to<block_close_msg>,
                                            caf::replies_to<block_batch_msg>::with<block_batch_msg>,
                                            caf::replies_to<block_train_msg>::with<block_train_result>>;

// Gate -> block actor: create / drop this session's KV cache.
struct block_open_msg {
  uint64_t session = 0;
  int64_t batch = 1;
  int64_t max_length = 0;
  Tensor prompts;  // this block's deep prompts [batch, P, hidden] (host), added at positions < P; or undefined
};
struct block_close_msg {
  uint64_t session = 0;
};
// One session's step within a batch: rows [row, row + batch·tokens) of the batch's hidden states, token r at
// positions[r]. A block that cannot run it (its cache is gone, the forward failed) sets `error`, and the blocks
// after it leave its rows alone.
struct batch_item {
  uint64_t session = 0;  // 0: no cache (the stateless forward)
  int64_t row = 0, batch = 1, tokens = 1;
  std::vector<int32_t> positions;
  std::string adapter;  // the session's LoRA adapter ("" = none)
  caf::error error;
  // Beam search: before this item runs, the session's sequence b continues sequence hypo_ids[b] (step_request's
  // hypo_ids, carried by the first chunk of a step only). Empty: no reordering.
  std::vector<int32_t> hypo_ids = {};
};
// Gate -> block actor: run the block over the steps of several sessions at once (hidden [M, D], in place, each
// item with its session's cache and adapter: the block's weights are read once for all of them), then hand the
// message to the block actors in `then`, in order; the last one replies with the message itself (its hidden
// states and items). One message per block instead of a request and a reply.
struct block_batch_msg {
  Tensor hidden;
  std::vector<batch_item> items;
  std::vector<block_actor_handle> then;
  // Where the device's time is modelled (kernels/modelled_time.hpp): when the work of the blocks before this one
  // ends. The step passes through the blocks at once and only the last waits, until its work ends.
  caf::actor_clock::time_point ready_at{};
};

// Gate -> block actors: the stateless forward, or forward then backward, of a chain of blocks (training).
// On the way forward block `index` adds its deep prompts (prompts[index]), keeps its input when a backward
// follows, runs its forward and passes the message to chain[index + 1]. The last block of a backward runs its
// backward instead and sends the message back down the chain; each block turns `grad` into the gradient of its
// input and stores its prompts' share. The block that finishes replies with a block_train_result.
struct block_train_msg {
  Tensor hidden;  // forward: the running hidden states (on the backend)
  std::vector<int32_t> positions;
  Tensor prompts;                         // [chain.size(), B, P, D] host, or undefined
  std::string adapter;                    // LoRA adapter ("" = none)
  std::vector<block_actor_handle> chain;  // the request's block actors, in order
  size_t index = 0;                       // this block's place in the chain
  bool backward = false;                  // a backward follows the forward
  bool going_back = false;                // the backward has started
  Tensor grad;                            // backward: the running gradient (on the backend)
  std::vector<Tensor> inputs;             // backward: each block's input, kept on the way forward
  Tensor grad_prompts;                    // backward: [chain.size(), B, P, D] host
};
struct block_train_result {
  Tensor hidden;        // forward: the output
  Tensor grad;          // backward: the gradient of the first block's input
  Tensor grad_prompts;  // backward with prompts
};

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::block_train_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::block_train_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::block_open_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::block_close_msg)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::block_batch_msg)
