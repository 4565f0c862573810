// Opening the session's route, and the failover of one hop.
//
// The failover of hop k (its server failed) is a state machine, one hop_recovery per failure:
//
//   planning ──a route──> opening(j) ──opened──> replaying(j) ──replayed──> opening(j + 1) ... ──none left──> spliced
//     ▲   │ no route           │ failed                │ failed
//     │   ▼                    ▼                       ▼
//     │ backing_off <────── server_failed: that server is left out of this pass
//     │   │                    (the request's own error: any server would refuse it ─────────────────> given_up)
//     └───┤ after retry_delay(round)
//         └─ past the deadline ──────────────────────────────────────────────────────────────────────────> given_up
//
// planning asks the swarm client for a chain over the hop's blocks (skipping banned servers and those that failed
// in this pass; with no route at all, the pass starts over with every server: one restarted meanwhile is welcome
// again). opening(j) opens replacement j's part of the session; replaying(j) runs through it what it must hold:
// the failed hop's history (merged into few requests), then for each later replacement the outputs of the one
// before. spliced puts the replacements in the route in the failed hop's place.
#include <caf/all.hpp>

#include "actors/client/session_messages.hpp"
#include "actors/client/session_state.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/trust/identity_proof.hpp"

namespace corolla::session {
namespace {

// Resolves the hop's server and opens its part of the session (monitoring the server from then on).
void open_hop(session_actor* self, std::shared_ptr<session_hop> hop, error_done done) {
  const auto& opt = self->state.opt;
  self->request(self->state.connector, opt.request_timeout, resolve_atom::value, hop->plan.address)
      .then(
          [=](caf::actor gate) {
            hop->gate = gate;
            auto settle = settle_once_or_on_down(self, gate, hop->plan.address, done);
            self->monitor(gate);  // a gate already gone is reported at once
            const auto& o = self->state.opt;
            const Tensor prompts = o.prompts.defined() && o.prompts.numel() > 0
                                       ? o.prompts.slice_rows(hop->plan.first, hop->plan.last)
                                       : Tensor();
            const std::string challenge = make_challenge();
            self->request(
                    gate, o.request_timeout,
                    open_session{
                        o.max_length, o.batch, hop->plan.first, hop->plan.last, o.adapter, prompts, challenge, {}})
                .then(
                    [=](const session_opened& r) {
                      // A server routed to by its DHT record must hold the key that signed the record: a record
                      // that names someone else's address fails here.
                      if (!hop->plan.owner.empty() &&
                          (r.owner != hop->plan.owner || !identity_proven(r.owner, challenge, r.proof))) {
                        caf::anon_send(gate, close_session{r.session_id, {}});
                        return settle(make_error(
                            errc::peer_unavailable,
                            "the server at " + hop->plan.address + " does not hold the key its DHT record names"));
                      }
                      hop->session_id = r.session_id;
                      settle(caf::error{});
                    },
                    [=](caf::error& e) { settle(std::move(e)); });
          },
          [=](caf::error& e) { done(std::move(e)); });
}

// Runs `inputs` through `hop`, one request each, in order; collects the outputs.
void replay_through(session_actor* self, std::shared_ptr<session_hop> hop, std::vector<history_entry> inputs, size_t i,
                    std::shared_ptr<std::vector<history_entry>> outputs, error_done done) {
  if (i == inputs.size()) return done(caf::error{});
  const uint64_t step = self->state.next_step++;
  step_request req{hop->session_id, step, inputs[i].hidden, inputs[i].positions, {}, {}};
  self->request(hop->gate, self->state.opt.request_timeout, std::move(req))
      .then(
          [=](step_reply& r) {
            if (!r.wire_error.empty())
              return done(make_error(errc::peer_unavailable, "garbled reply: " + r.wire_error));
            outputs->push_back({std::move(r.hidden), inputs[i].positions});
            replay_through(self, hop, inputs, i + 1, outputs, done);
          },
          [=](caf::error& e) { done(std::move(e)); });
}

enum class phase { planning, opening, replaying, backing_off, spliced, given_up };

const char* to_string(phase p) {
  switch (p) {
    case phase::planning: return "planning";
    case phase::opening: return "opening";
    case phase::replaying: return "replaying";
    case phase::backing_off: return "backing_off";
    case phase::spliced: return "spliced";
    case phase::given_up: return "given_up";
  }
  return "?";
}

struct hop_recovery {
  phase now = phase::planning;
  size_t k = 0;  // the failed hop's place in the route
  session_hop failed;
  std::set<std::string> failed_here;  // peer ids left out of this pass (the failed server first)
  caf::actor_clock::time_point deadline;
  int round = 0;  // backoffs so far
  std::vector<std::shared_ptr<session_hop>> replacements;
  size_t j = 0;                       // the replacement being opened or replayed into
  std::vector<history_entry> inputs;  // what replacement j must take
  caf::error problem;                 // the last failure, for given_up's message
  error_done done;
};
using recovery = std::shared_ptr<hop_recovery>;

void enter(session_actor* self, const recovery& r, phase next);

// Whether a callback still belongs to the phase it was sent in (each is answered once; this keeps it so).
bool in(const recovery& r, phase p) { return r->now == p; }

// A replacement failed to open or to replay: the request's own error ends the recovery; a server's failure leaves
// that server out of this pass and backs off.
void server_failed(session_actor* self, const recovery& r, caf::error e) {
  for (auto& h : r->replacements) close_hop(self, *h);
  r->problem = e;
  if (!is_server_failure(e)) return enter(self, r, phase::given_up);
  const planned_hop bad = r->replacements[r->j]->plan;
  r->failed_here.insert(peer_id(bad));
  self->state.stats.failures.push_back(bad.address + ": " + describe(e));
  report_failure(self, bad, e);
  enter(self, r, phase::backing_off);
}

void plan(session_actor* self, const recovery& r) {
  auto& st = self->state;
  const int64_t cache = st.opt.max_length * st.opt.batch;
  self->request(st.client, st.opt.request_timeout,
                replan_request{r->failed.plan.first, r->failed.plan.last, cache, r->failed_here, st.opt.adapter, false})
      .then(
          [=](std::vector<planned_hop>& chain) {
            if (!in(r, phase::planning)) return;
            r->replacements.clear();
            for (auto& p : chain)
              r->replacements.push_back(std::make_shared<session_hop>(session_hop{p, {}, 0, false, {}}));
            r->j = 0;
            r->inputs = merge_for_replay(r->failed.history);
            enter(self, r, phase::opening);
          },
          [=](caf::error& e) {
            if (!in(r, phase::planning)) return;
            r->failed_here.clear();  // every candidate failed once: the next pass tries them all again
            r->problem = std::move(e);
            enter(self, r, phase::backing_off);
          });
}

void open_replacement(session_actor* self, const recovery& r) {
  if (r->j == r->replacements.size()) return enter(self, r, phase::spliced);
  open_hop(self, r->replacements[r->j], [=](caf::error e) {
    if (!in(r, phase::opening)) return;
    if (e) return server_failed(self, r, std::move(e));
    enter(self, r, phase::replaying);
  });
}

// The replacement's replay gave `outputs`, which the next replacement is to take as its history: a replay is the
// server's work that no step's spot check sees, so where the session checks, it is checked as a step is (verify)
// before anything is built on it. done() when it stands.
void check_replay(session_actor* self, const recovery& r, const std::vector<history_entry>& outputs,
                  std::function<void()> done) {
  auto& st = self->state;
  const auto& hop = r->replacements[r->j];
  if (r->j + 1 == r->replacements.size() || st.opt.spot_checks.every <= 0 || !st.client || outputs.empty())
    return done();
  auto input = as_one_forward(r->inputs);
  auto claimed = as_one_forward(outputs);
  if (!input || !claimed) {
    ++st.stats.unverified;
    return done();
  }
  std::set<std::string> avoid = r->failed_here;
  avoid.insert(peer_id(hop->plan));
  const int64_t tokens = claimed->hidden.dim(1);
  verify(self, hop->plan, std::move(*input), claimed->hidden, tokens, std::move(avoid), [=](check_result c) {
    if (!in(r, phase::replaying)) return;
    if (c.verdict == check_result::lied) {
      ++self->state.stats.wrong_outputs;
      return server_failed(self, r,
                           make_error(errc::wrong_output, "server " + hop->plan.address + " (" +
                                                              blocks_name(hop->plan) + "), replaying: " + c.why));
    }
    if (c.verdict == check_result::unverified) ++self->state.stats.unverified;
    done();
  });
}

void replay_into_replacement(session_actor* self, const recovery& r) {
  auto hop = r->replacements[r->j];
  auto outputs = std::make_shared<std::vector<history_entry>>();
  const auto t0 = self->clock().now();
  replay_through(self, hop, r->inputs, 0, outputs,
                 settle_once_or_on_down(self, hop->gate, hop->plan.address, [=](caf::error e) {
                   if (!in(r, phase::replaying)) return;
                   if (e) return server_failed(self, r, std::move(e));
                   if (!r->inputs.empty()) report(self, hop->plan, true, ms_since(self, t0));
                   check_replay(self, r, *outputs, [=] {
                     hop->history = std::move(r->inputs);
                     r->inputs = std::move(*outputs);
                     ++r->j;
                     enter(self, r, phase::opening);
                   });
                 }));
}

void back_off(session_actor* self, const recovery& r) {
  const auto delay = retry_delay(r->round++);
  if (self->clock().now() + delay > r->deadline) {
    r->problem = make_error(errc::no_route, "found no working replacement for " + blocks_name(r->failed.plan) +
                                                " in time; last problem: " + describe(r->problem));
    return enter(self, r, phase::given_up);
  }
  after(self, delay, [=] {
    if (in(r, phase::backing_off)) enter(self, r, phase::planning);
  });
}

void splice(session_actor* self, const recovery& r) {
  auto& hs = self->state.hops;
  hs.erase(hs.begin() + static_cast<std::ptrdiff_t>(r->k));
  std::vector<session_hop> fresh;
  for (auto& h : r->replacements) fresh.push_back(std::move(*h));
  hs.insert(hs.begin() + static_cast<std::ptrdiff_t>(r->k), std::make_move_iterator(fresh.begin()),
            std::make_move_iterator(fresh.end()));
  r->done(caf::error{});
}

// The transition table's one entry point: each phase's action.
void enter(session_actor* self, const recovery& r, phase next) {
  log::debug(log::Part::session, [&] {
    return "recovery of " + blocks_name(r->failed.plan) + ": " + to_string(r->now) + " -> " + to_string(next);
  });
  r->now = next;
  switch (next) {
    case phase::planning: return plan(self, r);
    case phase::opening: return open_replacement(self, r);
    case phase::replaying: return replay_into_replacement(self, r);
    case phase::backing_off: return back_off(self, r);
    case phase::spliced: return splice(self, r);
    case phase::given_up: return r->done(r->problem);
  }
}

}  // namespace

void recover_hop(session_actor* self, size_t k, caf::actor_clock::time_point deadline, error_done done) {
  auto r = std::make_shared<hop_recovery>();
  r->k = k;
  r->failed = self->state.hops[k];
  r->failed_here = {peer_id(r->failed.plan)};
  r->deadline = deadline;
  r->done = std::move(done);
  close_hop(self, r->failed);
  enter(self, r, phase::planning);
}

void open_route(session_actor* self, error_done done) {
  auto& st = self->state;
  size_t i = 0;
  while (i < st.hops.size() && st.hops[i].session_id) ++i;
  if (i == st.hops.size()) return done(caf::error{});
  auto hop = std::make_shared<session_hop>(st.hops[i]);
  open_hop(self, hop, [=](caf::error e) {
    auto& hs = self->state.hops;
    if (i >= hs.size() || hs[i].plan.address != hop->plan.address)
      return done(make_error(errc::internal, "route changed while opening"));
    if (!e) {
      hs[i].gate = hop->gate;
      hs[i].session_id = hop->session_id;
      return open_route(self, done);
    }
    if (!is_server_failure(e)) return done(std::move(e));
    hs[i].gate = hop->gate;
    self->state.stats.failures.push_back(hop->plan.address + ": " + describe(e));
    report_failure(self, hop->plan, e);
    recover_hop(self, i, self->clock().now() + self->state.opt.recovery_timeout, [=](caf::error e) {
      if (e) return done(std::move(e));
      open_route(self, done);
    });
  });
}

}  // namespace corolla::session
