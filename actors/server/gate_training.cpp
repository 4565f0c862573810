#include "actors/server/gate_training.hpp"

#include <algorithm>

#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/wire_stream.hpp"
#include "actors/server/gate_state.hpp"
#include "actors/trust/identity_proof.hpp"
#include "model/train/span_training.hpp"

namespace corolla {

std::string check_adapter(const gate_options& opt, const std::string& adapter) {
  if (adapter.empty() || std::find(opt.adapters.begin(), opt.adapters.end(), adapter) != opt.adapters.end()) return {};
  std::string held;
  for (const auto& a : opt.adapters) held += (held.empty() ? "" : ", ") + a;
  return "unknown adapter '" + adapter + "' (this server holds " + (held.empty() ? std::string("none") : held) + ")";
}

caf::expected<std::vector<block_actor_handle>> training_chain(const gate_options& opt,
                                                              const std::vector<block_actor_handle>& blocks,
                                                              int64_t first_block, int64_t last_block,
                                                              const Tensor& hidden, const Tensor& prompts,
                                                              const std::string& adapter) {
  if (auto problem = check_adapter(opt, adapter); !problem.empty()) return make_error(errc::bad_request, problem);
  int64_t first = first_block, last = last_block;
  if (first == 0 && last == 0) first = opt.first_block, last = opt.last_block;
  if (first < opt.first_block || last > opt.last_block || first >= last)
    return make_error(errc::unknown_block, "blocks " + block_span(first, last) + " are not all served here (blocks " +
                                               block_span(opt.first_block, opt.last_block) + ")");
  if (auto problem = check_prompts(prompts, hidden, last - first); !problem.empty())
    return make_error(errc::bad_request, problem);
  return std::vector<block_actor_handle>(blocks.begin() + (first - opt.first_block),
                                         blocks.begin() + (last - opt.first_block));
}

block_train_msg training_message(Backend& backend, std::vector<block_actor_handle> chain, const Tensor& hidden,
                                 std::vector<int32_t> positions, const Tensor& prompts, std::string adapter,
                                 const Tensor* grad) {
  block_train_msg m;
  m.hidden = working_copy(backend, hidden);
  m.positions = std::move(positions);
  if (has_prompts(prompts)) m.prompts = prompts;
  m.adapter = std::move(adapter);
  m.chain = std::move(chain);
  if (grad) {
    m.backward = true;
    m.grad = working_copy(backend, *grad);
    if (has_prompts(prompts)) m.grad_prompts = Tensor::empty(DType::f32, prompts.shape());
  }
  return m;
}

namespace gate {
namespace {

// Delivers a reply that was streamed to the requester (the message naming the stream), or says why its stream
// failed (the requester refused a chunk, or stopped answering).
template <class Reply>
void deliver_streamed(caf::typed_response_promise<Reply>& rp, caf::expected<Reply> out) {
  if (out)
    rp.deliver(std::move(*out));
  else
    rp.deliver(make_error(errc::bad_request, "the reply could not be streamed back: " + describe(out.error())));
}

// What a forward and a backward request must pass before their chain runs: a request that decoded, within its
// sender's rate, whole (its streamed parts arrived: wire_stream.hpp), to a server whose blocks are loaded, with
// hidden states and positions this server takes.
template <class Request>
caf::error admit_training(gate_actor* self, Request& req) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (auto busy = charge_request(self, sender_node(self))) return busy;
  if (auto problem = stream_in(s.inbound, caf::actor_cast<caf::actor_addr>(self->current_sender()), req);
      !problem.empty())
    return make_error(errc::bad_request, problem);
  if (s.blocks.empty()) return make_error(errc::peer_unavailable, "the server is still loading its blocks (joining)");
  if (auto msg = check_hidden(s.opt, req.hidden, req.positions); !msg.empty())
    return make_error(errc::bad_request, msg);
  return {};
}

}  // namespace

caf::result<forward_reply> run_forward(gate_actor* self, forward_request& req) {
  auto& s = self->state;
  if (auto refusal = admit_training(self, req)) return refusal;
  const auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  if (req.challenge.size() > kMaxChallengeBytes)
    return make_error(errc::bad_request, "a challenge of " + std::to_string(req.challenge.size()) + " bytes; at most " +
                                             std::to_string(kMaxChallengeBytes));
  auto chain = training_chain(s.opt, s.blocks, req.first_block, req.last_block, req.hidden, req.prompts, req.adapter);
  if (!chain) return std::move(chain.error());
  // Who answers, and the proof of it the client asked for: a record naming this server's address under
  // another key is caught here, as at open_session.
  forward_reply signed_reply;
  if (s.opt.identity) {
    signed_reply.owner = to_hex(s.opt.identity->public_key());
    if (!req.challenge.empty()) signed_reply.proof = prove_identity(*s.opt.identity, req.challenge);
  }
  auto rp = self->make_response_promise<forward_reply>();
  auto msg = training_message(*s.backend, std::move(*chain), req.hidden, std::move(req.positions), req.prompts,
                              std::move(req.adapter));
  block_actor_handle first = msg.chain.front();
  self->request(first, s.opt.step_timeout, std::move(msg))
      .then(
          [=](block_train_result& r) mutable {
            auto& s = self->state;
            signed_reply.hidden = std::move(r.hidden);
            stream_out(self, requester, std::move(signed_reply), s.opt.streams, s.next_stream,
                       [=](caf::expected<forward_reply> out) mutable { deliver_streamed(rp, std::move(out)); });
          },
          [=](caf::error& e) mutable {
            rp.deliver(timeout_or(std::move(e), "the forward through " + span_name(self->state.opt)));
          });
  return rp;
}

caf::result<backward_reply> run_backward(gate_actor* self, backward_request& req) {
  auto& s = self->state;
  if (auto refusal = admit_training(self, req)) return refusal;
  const auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  if (req.grad_output.dtype() != DType::f32 || req.grad_output.shape() != req.hidden.shape())
    return make_error(errc::bad_request, "the output gradient " + req.grad_output.describe() +
                                             " does not match the hidden states " + req.hidden.describe());
  auto chain = training_chain(s.opt, s.blocks, req.first_block, req.last_block, req.hidden, req.prompts, req.adapter);
  if (!chain) return std::move(chain.error());
  auto rp = self->make_response_promise<backward_reply>();
  auto msg = training_message(*s.backend, std::move(*chain), req.hidden, std::move(req.positions), req.prompts,
                              std::move(req.adapter), &req.grad_output);
  block_actor_handle first = msg.chain.front();
  self->request(first, s.opt.step_timeout, std::move(msg))
      .then(
          [=](block_train_result& r) mutable {
            auto& s = self->state;
            stream_out(self, requester, backward_reply{std::move(r.grad), std::move(r.grad_prompts), 0, {}},
                       s.opt.streams, s.next_stream,
                       [=](caf::expected<backward_reply> out) mutable { deliver_streamed(rp, std::move(out)); });
          },
          [=](caf::error& e) mutable {
            rp.deliver(timeout_or(std::move(e), "the backward through " + span_name(self->state.opt)));
          });
  return rp;
}

}  // namespace gate

}  // namespace corolla
