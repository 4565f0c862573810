// Spot checks of a step's hops (actors/client/spot_check.hpp chooses which): a hop's history and this step's input
// recomputed on other servers and compared with what it returned; a second verifier decides a disagreement.
#include <caf/all.hpp>
#include <algorithm>

#include "actors/client/session_messages.hpp"
#include "actors/client/session_state.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/wire_stream.hpp"
#include "actors/trust/identity_proof.hpp"
#include "model/kv_pool.hpp"

namespace corolla::session {
namespace {

// Sends a stateless forward of `input` through blocks [hop.first, hop.last) of verifier `chain` from hop j on.
void forward_through(session_actor* self, std::shared_ptr<recomputation> r, size_t j, history_entry input,
                     recomputation_done done) {
  if (j == r->chain.size()) {
    r->hidden = std::move(input.hidden);
    return done(std::move(*r));
  }
  const planned_hop v = r->chain[j];
  self->request(self->state.connector, self->state.opt.request_timeout, resolve_atom::value, v.address)
      .then(
          [=](caf::actor gate) mutable {
            auto& st = self->state;
            // Settled once: by the reply, or by the gate's node going down (CAF fails no request pending there).
            auto over = std::make_shared<bool>(false);
            auto settle = settle_once_or_on_down(self, gate, v.address, [=](caf::error e) mutable {
              if (*over || !e) return;
              *over = true;
              done(std::move(e));
            });
            self->monitor(gate);
            const Tensor prompts = st.opt.prompts.defined() && st.opt.prompts.numel() > 0
                                       ? st.opt.prompts.slice_rows(v.first, v.last)
                                       : Tensor();
            const auto positions = input.positions;
            const Shape shape = input.hidden.shape();
            const std::string challenge = make_challenge();
            forward_request req{std::move(input.hidden), positions, prompts, v.first,  v.last,
                                st.opt.adapter,          0,         {},      challenge};
            auto reply = [=](caf::expected<forward_reply> out) mutable {
              if (*over) return;
              *over = true;
              settle(caf::error{});
              if (!out) return done(std::move(out.error()));
              if (!out->wire_error.empty())
                return done(make_error(errc::peer_unavailable, "garbled reply from " + v.address));
              if (auto problem = stream_in(self->state.inbound, gate.address(), *out); !problem.empty())
                return done(make_error(errc::peer_unavailable, "broken reply from " + v.address + ": " + problem));
              if (!answered_by(v.owner, challenge, out->owner, out->proof))
                return done(make_error(errc::peer_unavailable,
                                       "the server at " + v.address + " does not hold the key its DHT record names"));
              if (out->hidden.dtype() != DType::f32 || out->hidden.shape() != shape) {
                auto e = make_error(errc::wrong_output, v.address + " returned " + out->hidden.describe());
                if (self->state.client) self->send(self->state.client, failure_report(peer_id(v), e));
                return done(std::move(e));
              }
              forward_through(self, r, j + 1, {std::move(out->hidden), positions}, done);
            };
            stream_out(self, gate, std::move(req), st.opt.streams, st.next_stream,
                       [=](caf::expected<forward_request> sent) mutable {
                         if (!sent) return reply(std::move(sent.error()));
                         self->request(gate, self->state.opt.request_timeout, std::move(*sent))
                             .then([=](forward_reply& out) mutable { reply(std::move(out)); },
                                   [=](caf::error& e) mutable { reply(std::move(e)); });
                       });
          },
          [=](caf::error& e) { done(std::move(e)); });
}

// Recomputes `input` over the blocks of `hop` on servers other than those in `avoid` (a route the swarm client
// plans over its view, skipping banned servers).
void recompute(session_actor* self, const planned_hop& hop, history_entry input, std::set<std::string> avoid,
               recomputation_done done) {
  auto& st = self->state;
  self->request(st.client, st.opt.request_timeout,
                replan_request{hop.first, hop.last, 0, std::move(avoid), st.opt.adapter, true})
      .then(
          [=](std::vector<planned_hop>& chain) mutable {
            auto r = std::make_shared<recomputation>();
            r->chain = std::move(chain);
            forward_through(self, r, 0, std::move(input), done);
          },
          [=](caf::error& e) { done(std::move(e)); });
}

void passed_check(session_actor* self, size_t k) {
  auto& st = self->state;
  ++st.stats.spot_checks;
  st.hops[k].plan.unchecked = false;
  if (st.client) {
    peer_report r{peer_id(st.hops[k].plan), true, 0, {}, true, 0};
    self->send(st.client, r);
  }
}

// The step's hop k lied (its output disagrees with recomputations): the step runs again, and the servers after it,
// which took the wrong output in, recompute from what the hop's replacement sends (a step id with another input is
// applied again, not answered from the last output).
void caught(session_actor* self, std::shared_ptr<step_run> run, size_t k, const std::string& why) {
  auto& st = self->state;
  ++st.stats.wrong_outputs;
  fail(self, run, k,
       make_error(errc::wrong_output,
                  "server " + st.hops[k].plan.address + " (" + blocks_name(st.hops[k].plan) + "): " + why));
}

// Checks hop k of the step: recomputes its history and this step's input elsewhere and compares (verify).
void spot_check(session_actor* self, std::shared_ptr<step_run> run, std::vector<size_t> hops, size_t i, Tensor out) {
  auto& st = self->state;
  if (i == hops.size()) return commit(self, run, std::move(out));
  const size_t k = hops[i];
  auto next = [=]() mutable { spot_check(self, run, hops, i + 1, std::move(out)); };
  const session_hop& hop = st.hops[k];
  std::vector<history_entry> history = hop.history;  // as the hop's cache holds it for this step
  reorder_sequences(history, run->hypo_ids);
  auto input = verification_input(history, {*run->inputs[k], *run->positions});
  if (!input) {
    ++st.stats.unverified;
    return next();
  }
  const Tensor claimed = k + 1 < st.hops.size() ? *run->inputs[k + 1] : out;
  const uint64_t a = run->attempt;
  verify(self, hop.plan, std::move(*input), claimed, run->input.dim(1), {peer_id(hop.plan)},
         [=](check_result c) mutable {
           if (stale(self, run, a)) return;
           switch (c.verdict) {
             case check_result::agreed: passed_check(self, k); return next();
             case check_result::unverified:
               // The step stays unchecked, and the hop is no longer checked on every step for being new (it still
               // comes up at the usual rate).
               ++self->state.stats.unverified;
               self->state.hops[k].plan.unchecked = false;
               return next();
             case check_result::lied: return caught(self, run, k, c.why);
           }
         });
}

}  // namespace

void verify(session_actor* self, const planned_hop& hop, history_entry input, Tensor claimed, int64_t tokens,
            std::set<std::string> avoid, std::function<void(check_result)> done) {
  decide_check(
      std::move(avoid), [=](std::set<std::string> a, recomputation_done d) { recompute(self, hop, input, a, d); },
      [=](const recomputation& r) {
        return compare_outputs(claimed, last_tokens(r.hidden, tokens), tolerance_for(hop, r.chain));
      },
      [=](const planned_hop& v) {
        if (self->state.client)
          self->send(self->state.client,
                     failure_report(peer_id(v), make_error(errc::wrong_output,
                                                           "a spot check it answered disagreed with two servers")));
      },
      std::move(done));
}

void complete(session_actor* self, std::shared_ptr<step_run> run, Tensor out) {
  auto& st = self->state;
  if (!st.client) return commit(self, run, std::move(out));
  std::vector<bool> unchecked;
  for (const auto& h : st.hops) unchecked.push_back(h.plan.unchecked);
  spot_check(self, run, hops_to_check(st.opt.spot_checks, unchecked, st.rng), 0, std::move(out));
}

}  // namespace corolla::session
