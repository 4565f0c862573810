// The span gate's sessions: opened on blocks of the span within the KV-cache budget and the opening peer's quota,
// closed by their owner, when the owner goes away (the behavior's down handler), or when idle too long.
#include "actors/log/node_log.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/server/gate_state.hpp"
#include "actors/server/gate_training.hpp"
#include "actors/trust/identity_proof.hpp"

namespace corolla::gate {
namespace {

// "" when `prompts` (undefined: none) are deep prompts for a session of `batch` sequences of up to `max_length`
// tokens through `blocks` blocks, else what is wrong.
std::string check_session_prompts(const gate_options& o, const Tensor& prompts, int64_t blocks, int64_t batch,
                                  int64_t max_length) {
  if (!prompts.defined() || prompts.numel() == 0) return {};
  const std::string want = "f32[" + std::to_string(blocks) + ", " + std::to_string(batch) + ", prompt_len, " +
                           std::to_string(o.hidden_size) + "]";
  if (prompts.dtype() != DType::f32 || prompts.rank() != 4 || prompts.dim(0) != blocks || prompts.dim(1) != batch ||
      prompts.dim(3) != o.hidden_size)
    return "deep prompts must be " + want + " (blocks, batch, prompt length, hidden size), got " + prompts.describe();
  if (prompts.dim(2) > max_length)
    return "deep prompts of length " + std::to_string(prompts.dim(2)) + " exceed the session's max_length " +
           std::to_string(max_length);
  return {};
}

// Block i's deep prompts [B, P, D] of a session's [blocks, B, P, D], or undefined.
Tensor block_prompts(const Tensor& prompts, size_t i) {
  if (!prompts.defined() || prompts.numel() == 0) return {};
  const auto k = static_cast<int64_t>(i);
  return prompts.slice_rows(k, k + 1).reshaped({prompts.dim(1), prompts.dim(2), prompts.dim(3)});
}

}  // namespace

void release_session(gate_actor* self, uint64_t id) {
  auto& st = self->state;
  auto it = st.sessions.find(id);
  if (it == st.sessions.end()) return;
  log::info(log::Part::server, [&] { return "session closed: " + std::to_string(id); });
  for (auto& r : it->second.repeats)
    r.rp.deliver(make_error(errc::unknown_session, "the session closed during the step"));
  for (size_t i = it->second.first; i < it->second.last; ++i) caf::anon_send(st.blocks[i], block_close_msg{id});
  st.budget.release(it->second.first, it->second.last, it->second.batch, it->second.max_length);
  if (it->second.quota_charged) st.quotas.closed(it->second.owner.node(), it->second.reserved);
  if (auto o = st.owners.find(it->second.owner); o != st.owners.end() && --o->second <= 0) {
    self->demonitor(it->second.owner);
    st.owners.erase(o);
  }
  st.batcher->forget(id);
  st.sessions.erase(it);
}

caf::result<session_opened> open_on_blocks(gate_actor* self, const open_session& req) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (s.blocks.empty()) return make_error(errc::peer_unavailable, "the server is still loading its blocks (joining)");
  if (req.max_length < 1 || req.max_length > s.opt.max_position)
    return make_error(errc::bad_request, "max_length " + std::to_string(req.max_length) + " is outside 1.." +
                                             std::to_string(s.opt.max_position));
  if (req.batch < 1 || req.batch > 64)
    return make_error(errc::bad_request, "batch " + std::to_string(req.batch) + " is outside 1..64");
  int64_t first = req.first_block, last = req.last_block;
  if (first == 0 && last == 0) first = s.opt.first_block, last = s.opt.last_block;
  if (first < s.opt.first_block || last > s.opt.last_block || first >= last)
    return make_error(errc::unknown_block,
                      "blocks " + block_span(first, last) + " are not all served here (" + span_name(s.opt) + ")");
  if (auto problem = check_adapter(s.opt, req.adapter); !problem.empty()) return make_error(errc::bad_request, problem);
  if (auto problem = check_session_prompts(s.opt, req.prompts, last - first, req.batch, req.max_length);
      !problem.empty())
    return make_error(errc::bad_request, problem);
  if (req.challenge.size() > kMaxChallengeBytes)
    return make_error(errc::bad_request, "a challenge of " + std::to_string(req.challenge.size()) + " bytes; at most " +
                                             std::to_string(kMaxChallengeBytes));
  const caf::node_id peer = sender_node(self);
  if (auto busy = charge_request(self, peer)) return busy;
  const int64_t need = req.batch * req.max_length * (last - first);
  const bool remote = peer != self->node();
  if (remote)
    if (auto refusal = s.quotas.admit_session(peer, need)) return make_busy_error(refusal->why, refusal->retry_after);
  if (static_cast<int64_t>(s.sessions.size()) >= s.opt.max_sessions)
    return make_error(errc::out_of_cache,
                      "the server already holds its maximum of " + std::to_string(s.opt.max_sessions) + " sessions");
  const size_t first_index = static_cast<size_t>(first - s.opt.first_block),
               last_index = static_cast<size_t>(last - s.opt.first_block);
  if (!s.budget.try_reserve(first_index, last_index, req.batch, req.max_length))
    return make_error(errc::out_of_cache, "the server has " + std::to_string(s.budget.tokens_left_per_block()) +
                                              " cache tokens left per block; the session needs " +
                                              std::to_string(req.batch * req.max_length));
  uint64_t id;
  do id = s.rng();
  while (id == 0 || s.sessions.count(id));
  gate_session session;
  session.id = id;
  session.adapter = req.adapter;
  session.owner = caf::actor_cast<caf::actor_addr>(self->current_sender());
  session.batch = req.batch;
  session.max_length = req.max_length;
  session.first = first_index;
  session.last = last_index;
  session.reserved = need;
  session.length.assign(static_cast<size_t>(req.batch), 0);
  session.last_active = self->clock().now();
  session.quota_charged = remote;
  if (remote) s.quotas.opened(peer, need);
  if (session.owner && s.owners[session.owner]++ == 0) self->monitor(session.owner);
  s.sessions[id] = session;
  auto rp = self->make_response_promise<session_opened>();
  session_opened opened{id, 0, {}, {}, {}};
  if (s.opt.identity) {
    opened.owner = to_hex(s.opt.identity->public_key());
    if (!req.challenge.empty()) opened.proof = prove_identity(*s.opt.identity, req.challenge);
  }
  auto pending = std::make_shared<size_t>(session.last - session.first);
  auto failed = std::make_shared<bool>(false);
  for (size_t i = session.first; i < session.last; ++i)
    self->request(s.blocks[i], s.opt.step_timeout,
                  block_open_msg{id, req.batch, req.max_length, block_prompts(req.prompts, i - session.first)})
        .then(
            [=]() mutable {
              if (--*pending == 0 && !*failed) {
                log::info(log::Part::server, [&] {
                  return "session opened: " + std::to_string(id) + "; blocks " +
                         block_span(session.first, session.last) + "; max_length " + std::to_string(req.max_length) +
                         "; batch " + std::to_string(req.batch) +
                         (remote ? "; from " + caf::to_string(peer) : std::string("; local"));
                });
                opened.cache_tokens_left = self->state.budget.tokens_left_per_block();
                rp.deliver(opened);
              }
            },
            [=](caf::error& e) mutable {
              if (*failed) return;
              *failed = true;
              release_session(self, id);
              rp.deliver(std::move(e));
            });
  return rp;
}

caf::result<ack> close_one_session(gate_actor* self, const close_session& req) {
  if (!req.wire_error.empty()) return make_error(errc::bad_request, req.wire_error);
  if (!self->state.sessions.count(req.session_id))
    return make_error(errc::unknown_session, "no session " + std::to_string(req.session_id));
  release_session(self, req.session_id);
  return ack{};
}

void sweep_idle_sessions(gate_actor* self, caf::timespan period) {
  auto& s = self->state;
  const auto now = self->clock().now();
  std::vector<uint64_t> idle;
  for (auto& [id, sess] : s.sessions)
    if (!sess.running && now - sess.last_active > s.opt.session_timeout) idle.push_back(id);
  for (uint64_t id : idle) release_session(self, id);
  s.quotas.sweep(now);
  self->delayed_send(self, period, sweep_atom::value);
}

}  // namespace corolla::gate
