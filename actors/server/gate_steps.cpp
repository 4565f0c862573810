// The span gate's inference steps: a repeated step id is answered from the session's last output (never applied
// twice); a new step joins the batcher (step_batcher.hpp), runs through the block actors with the steps of other
// sessions ready at the same time, and is answered, or passed on to the next server of a push route.
#include <algorithm>
#include <cstring>

#include "actors/protocol/errors.hpp"
#include "actors/server/gate_state.hpp"
#include "model/kv_pool.hpp"

namespace corolla::gate {
namespace {

// The requester of a push route's step (a client's inference session) as a forwarding server sees it: it takes the
// copy of this server's output.
using step_copy_receiver = caf::typed_actor<caf::reacts_to<step_reply>>;

void schedule_held_batches(gate_actor* self);

// Starts the batches of `group` that may start: each runs through block actors [first, last) of the span (they
// pass it along; the last replies), and when it is back the steps it ended are answered and the next batch of the
// group starts.
void run_batches(gate_actor* self, const step_group& group) {
  auto& st = self->state;
  while (auto batch = st.batcher->start(group, self->clock().now())) {
    const uint64_t id = batch->id;
    if (group.last > st.blocks.size() || group.first >= group.last) {
      st.batcher->finish(id, make_error(errc::unknown_session, "the server no longer hosts those blocks"),
                         self->clock().now());
      continue;
    }
    block_batch_msg msg = std::move(batch->msg);
    msg.hidden = st.backend->upload(msg.hidden);  // a tensor of the batch's own: the blocks may change it in place
    msg.then.assign(st.blocks.begin() + static_cast<std::ptrdiff_t>(group.first) + 1,
                    st.blocks.begin() + static_cast<std::ptrdiff_t>(group.last));
    self->request(st.blocks[group.first], st.opt.step_timeout, std::move(msg))
        .then(
            [=](block_batch_msg& done) {
              done.hidden = self->state.backend->download(done.hidden);
              self->state.batcher->finish(id, std::move(done), self->clock().now());
              run_batches(self, group);
            },
            [=](caf::error& e) {
              self->state.batcher->finish(
                  id, timeout_or(std::move(e), "the step through " + span_name(self->state.opt)), self->clock().now());
              run_batches(self, group);
            });
  }
  schedule_held_batches(self);
}

// Steps held for the rest of their cohort (step_batcher.hpp) start when the hold ends, if nothing started them
// before: one timer, at the earliest hold's end.
void schedule_held_batches(gate_actor* self) {
  auto& st = self->state;
  const auto end = st.batcher->next_hold_end();
  if (!end || (st.held_timer && *st.held_timer <= *end)) return;
  st.held_timer = *end;
  self->delayed_send(self, std::max(*end - self->clock().now(), caf::timespan{0}), batch_atom::value);
}

// Replies with the step's output, or passes it to the next server of a push route. A forwarding server first
// sends the requester (the client's session) a copy of its output: the next server's input, which the client
// keeps to rebuild that server's cache elsewhere should it fail.
void finish_step(gate_actor* self, caf::response_promise rp, const step_request& req, Tensor out,
                 const caf::actor& requester) {
  if (req.next.empty()) {
    rp.deliver(step_reply{req.session_id, req.step_id, std::move(out), {}});
    return;
  }
  if (requester)
    self->send(caf::actor_cast<step_copy_receiver>(requester), step_reply{req.session_id, req.step_id, out, {}});
  const route_hop hop = req.next.front();
  step_request fwd{hop.session_id,
                   req.step_id,
                   std::move(out),
                   req.positions,
                   std::vector<route_hop>(req.next.begin() + 1, req.next.end()),
                   {},
                   req.hypo_ids};
  if (auto it = self->state.next_hops.find(hop.address); it != self->state.next_hops.end()) {
    rp.delegate(it->second, std::move(fwd));
    return;
  }
  self->request(self->state.connector, std::chrono::seconds(10), resolve_atom::value, hop.address)
      .then(
          [=](caf::actor next) mutable {
            self->monitor(next);
            self->state.next_hops[hop.address] = next;
            rp.delegate(next, std::move(fwd));
          },
          [=](caf::error& e) mutable {
            rp.deliver(
                make_error(errc::peer_unavailable, "next server " + hop.address + " is unreachable: " + describe(e)));
          });
}

}  // namespace

void start_held_batches(gate_actor* self) {
  self->state.held_timer.reset();
  for (const step_group& group : self->state.batcher->due(self->clock().now())) run_batches(self, group);
  schedule_held_batches(self);
}

namespace {

// Whether two requests of one step id carry the same input (hidden states, positions, reordering), byte for byte. A
// step id names the input it was first sent with; the same id with another input is another computation: in a push
// route a server further along may get a step again from the replacement of a server that failed (or lied) before
// it, under the id it already ran with what that server sent.
bool same_input(const step_request& a, const step_request& b) {
  return a.positions == b.positions && a.hypo_ids == b.hypo_ids && a.hidden.dtype() == b.hidden.dtype() &&
         a.hidden.shape() == b.hidden.shape() &&
         (a.hidden.data() == b.hidden.data() || a.hidden.nbytes() == 0 ||
          std::memcmp(a.hidden.data(), b.hidden.data(), static_cast<size_t>(a.hidden.nbytes())) == 0);
}

void apply_step(gate_actor* self, step_request req, caf::typed_response_promise<step_reply> rp, caf::actor requester);

// A step of a session, answered through `rp`: a repeat of the last step with its input is answered again, a repeat
// of the running step waits for it; anything else is applied.
void take_step(gate_actor* self, step_request req, caf::typed_response_promise<step_reply> rp, caf::actor requester) {
  auto& s = self->state;
  if (!req.wire_error.empty()) return void(rp.deliver(make_error(errc::bad_request, req.wire_error)));
  auto it = s.sessions.find(req.session_id);
  if (it == s.sessions.end())
    return void(
        rp.deliver(make_error(errc::unknown_session, "no session " + std::to_string(req.session_id) + " on " +
                                                         span_name(s.opt) + " (closed, timed out, or never opened)")));
  gate_session& session = it->second;
  session.last_active = self->clock().now();
  if (session.has_output && req.step_id == session.last_step && same_input(req, session.last_request))
    return finish_step(self, rp, req, session.last_output, requester);  // a retry: answered again, not re-applied
  if (session.running && req.step_id == session.running_step)
    return session.repeats.push_back({rp, std::move(req), requester});
  apply_step(self, std::move(req), rp, requester);
}

void apply_step(gate_actor* self, step_request req, caf::typed_response_promise<step_reply> rp, caf::actor requester) {
  auto& s = self->state;
  gate_session& session = s.sessions.at(req.session_id);
  auto refuse = [&](caf::error e) { rp.deliver(std::move(e)); };
  // Charged to the session's owner, not the sender: in a push route the previous server sends the step.
  if (session.quota_charged)
    if (auto busy = charge_request(self, session.owner.node())) return refuse(std::move(busy));
  if (s.faults)
    if (auto fault = s.faults->refuse_step()) return refuse(std::move(fault));
  if (session.running)
    return refuse(make_error(errc::bad_request,
                             "step " + std::to_string(session.running_step) + " of this session is still running"));
  if (auto msg = check_hidden(s.opt, req.hidden, req.positions); !msg.empty())
    return refuse(make_error(errc::bad_request, msg));
  const int64_t b = req.hidden.dim(0), t = req.hidden.dim(1);
  if (b != session.batch)
    return refuse(make_error(errc::bad_request, "batch of " + std::to_string(b) + " in a session opened for " +
                                                    std::to_string(session.batch)));
  // Beam search: the sequences continue the hypotheses named, with their lengths.
  std::vector<int64_t> length = session.length;
  if (!req.hypo_ids.empty()) {
    if (auto problem = hypothesis_ids_problem(req.hypo_ids, b); !problem.empty())
      return refuse(make_error(errc::bad_request, problem));
    for (size_t i = 0; i < req.hypo_ids.size(); ++i) length[i] = session.length[static_cast<size_t>(req.hypo_ids[i])];
  }
  for (int64_t i = 0; i < b; ++i) {
    const int32_t* p = req.positions.data() + i * t;
    if (p[t - 1] >= session.max_length)
      return refuse(make_error(errc::max_length_exceeded, "position " + std::to_string(p[t - 1]) +
                                                              " is beyond the session's max_length " +
                                                              std::to_string(session.max_length)));
    if (p[0] > length[static_cast<size_t>(i)])
      return refuse(make_error(errc::bad_request, "sequence " + std::to_string(i) + " starts at position " +
                                                      std::to_string(p[0]) + " but holds only " +
                                                      std::to_string(length[static_cast<size_t>(i)]) +
                                                      " tokens (positions must not leave gaps)"));
    for (int64_t j = 1; j < t; ++j)
      if (p[j] != p[j - 1] + 1)
        return refuse(
            make_error(errc::bad_request, "positions of sequence " + std::to_string(i) + " are not consecutive"));
  }
  session.running = true;
  session.running_step = req.step_id;
  const uint64_t id = session.id;
  const step_group group{session.first, session.last};
  Tensor hidden = req.hidden;
  std::vector<int32_t> positions = req.positions;
  std::vector<int32_t> hypo_ids = req.hypo_ids;
  s.batcher->push(
      group, id, session.adapter, std::move(hidden), std::move(positions),
      [=, req = std::move(req)](caf::expected<Tensor> out) mutable {
        auto it = self->state.sessions.find(id);
        if (it == self->state.sessions.end()) {
          rp.deliver(make_error(errc::unknown_session, "the session closed during the step"));
          return;
        }
        gate_session& sess = it->second;
        sess.running = false;
        auto repeats = std::exchange(sess.repeats, {});
        if (!out) {
          rp.deliver(out.error());
          for (auto& r : repeats) r.rp.deliver(out.error());
          return;
        }
        const int64_t tt = req.hidden.dim(1);
        sess.length = length;  // (reordered by the step's hypothesis ids, if any)
        for (size_t i = 0; i < sess.length.size(); ++i)
          sess.length[i] = std::max<int64_t>(sess.length[i], req.positions[(i + 1) * tt - 1] + 1);
        sess.last_step = req.step_id;
        sess.has_output = true;
        sess.last_output = std::move(*out);
        if (self->state.faults) self->state.faults->served(sess.last_output);
        sess.last_request = {req.session_id, req.step_id, req.hidden, req.positions, {}, {}, req.hypo_ids};
        finish_step(self, rp, req, sess.last_output, requester);
        // Repeats with this input get its output; one with another input is a step of its own (same_input).
        for (auto& r : repeats) take_step(self, std::move(r.req), r.rp, r.requester);
      },
      self->clock().now(), std::move(hypo_ids));
  run_batches(self, group);
}

}  // namespace

caf::result<step_reply> run_step(gate_actor* self, step_request& req) {
  // The sender first: the response promise takes the request's sender over.
  auto requester = caf::actor_cast<caf::actor>(self->current_sender());
  auto rp = self->make_response_promise<step_reply>();
  take_step(self, std::move(req), rp, std::move(requester));
  return rp;
}

}  // namespace corolla::gate
