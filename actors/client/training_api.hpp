// The CAF actor API for training small parameters on the client while the blocks stay frozen, locally or on the
// swarm (see docs/client-api.md, "Training"):
//
//   block_runner_actor blocks = <reply to open_training_request sent to a swarm client>;  // the swarm's blocks
//   block_runner_actor blocks = spawn_local_block_runner(sys, source, backend);  // or every block in-process
//   trainer_actor trainer = spawn_trainer(sys, head, blocks, tuning_options);
//   self->request(trainer, t, train_step{batch}) -> train_step_result{step, loss, tokens, seconds}
//   self->request(trainer, t, save_atom::value, "prompts.safetensors") -> ack
//   self->request(trainer, t, params_atom::value) -> trained_parameters
//
// A block runner answers the stateless forward and backward of every block of the model:
//   blocks_forward{hidden [B, S, D], positions, prompts [L, B, P, D] or none} -> blocks_forward_result{out, pass}
//   blocks_backward{pass, grad_out}  -> blocks_backward_result{grad_in, grad_prompts}
// (the runner keeps what a pass's backward needs; a pass is backed up once).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/typed_actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/messages.hpp"
#include "model/train/prompt_tuning.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

using save_atom = caf::atom_constant<caf::atom("save")>;
using params_atom = caf::atom_constant<caf::atom("params")>;

struct open_training_request {
  std::string adapter;              // LoRA adapter the servers apply ("" = none); routes use only servers with it
  int64_t max_batch_tokens = 4096;  // larger batches are split into sub-batches with routes of their own
};

struct blocks_forward {
  Tensor hidden;                   // [B, S, D] f32, host
  std::vector<int32_t> positions;  // one per token
  Tensor prompts;                  // deep prompts [L, B, P, D], or undefined
};
struct blocks_forward_result {
  Tensor hidden;           // the last block's output [B, S, D]
  uint64_t pass = 0;       // names this forward for its backward
  int64_t unverified = 0;  // hops a spot check chose but nobody else could recompute: taken on faith
};
struct blocks_backward {
  uint64_t pass = 0;
  Tensor grad_output;  // [B, S, D]
};
struct blocks_backward_result {
  Tensor grad_input;       // [B, S, D]
  Tensor grad_prompts;     // [L, B, P, D], or undefined without prompts
  int64_t unverified = 0;  // as blocks_forward_result's
};

// Reply to params_atom: the trainable tensors by name (copies).
struct trained_parameters {
  std::vector<std::pair<std::string, Tensor>> tensors;
};

struct train_step {
  TrainingBatch batch;
};
struct train_step_result {
  int64_t step = 0;    // steps taken so far
  double loss = 0;     // before this step's update
  int64_t tokens = 0;  // real tokens of the batch
  double seconds = 0;  // wall time of the step (forward, backward, update)
};

// A block runner: the stateless forward and backward of every block of the model (a training session over the
// swarm, or every block in this process).
using block_runner_actor = caf::typed_actor<caf::replies_to<blocks_forward>::with<blocks_forward_result>,
                                            caf::replies_to<blocks_backward>::with<blocks_backward_result>>;

// A training session over the swarm (the swarm client's answer to open_training_request): a block runner that
// also tells the routes its last requests took ("HOST:PORT first:last" per hop).
using training_session_actor = block_runner_actor::extend<caf::replies_to<route_atom>::with<std::vector<std::string>>>;

// The training loop.
using trainer_actor = caf::typed_actor<caf::replies_to<train_step>::with<train_step_result>,
                                       caf::replies_to<save_atom, std::string>::with<ack>,
                                       caf::replies_to<params_atom>::with<trained_parameters>>;

// Every block of `source` in this process, on `backend` (which must outlive the actor). Spawned detached.
block_runner_actor spawn_local_block_runner(caf::actor_system& sys, std::shared_ptr<WeightSource> source,
                                            std::shared_ptr<Backend> backend);

// The training loop's actor: owns the trainable parameters (PromptTuning) and runs steps through `blocks`.
// Spawned detached (the loss over a large vocabulary is computed in it).
trainer_actor spawn_trainer(caf::actor_system& sys, std::shared_ptr<const ClientHead> head, block_runner_actor blocks,
                            TuningOptions options, caf::timespan step_timeout = std::chrono::minutes(10));

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::open_training_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::blocks_forward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::blocks_forward_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::blocks_backward)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::blocks_backward_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::trained_parameters)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::train_step)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::train_step_result)
