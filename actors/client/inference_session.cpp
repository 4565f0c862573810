#include "actors/client/head_batcher.hpp"
#include "actors/client/inference_session.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "actors/client/session_history.hpp"
#include "actors/client/session_messages.hpp"
#include "actors/client/spot_check.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/trust/identity_proof.hpp"
#include "model/kv_pool.hpp"

namespace corolla {
namespace {

using tensor_done = std::function<void(caf::expected<Tensor>)>;
using error_done = std::function<void(caf::error)>;

// A step that fails again waits before its next recovery, from kFirstRetry doubling up to kLongestRetry: a swarm
// in turmoil is not hammered, and the step's time budget (recovery_timeout from its first fault) spans the
// turmoil rather than a count of failures.
constexpr auto kFirstRetry = std::chrono::milliseconds(50);
constexpr auto kLongestRetry = std::chrono::seconds(1);
// How long a push step waits for the forwarding servers' output copies after the last server replied, before
// asking those servers again (they answer a repeated step id from their last output).
constexpr auto kCopyGrace = std::chrono::milliseconds(200);

using retry_atom = caf::atom_constant<caf::atom("retry")>;

struct session_hop {
  planned_hop plan;
  caf::actor gate;
  uint64_t session_id = 0;
  bool down = false;                   // its node went down while no step was running
  std::vector<history_entry> history;  // every input this hop has taken, in order
};

// The step in flight.
struct step_run {
  uint64_t step = 0;
  Tensor input;
  std::shared_ptr<const std::vector<int32_t>> positions;
  std::vector<int32_t> hypo_ids;  // beam search: the sequences this step's continue (empty: their own)
  tensor_done done;
  uint64_t attempt = 0;                       // replies to older attempts are ignored
  std::vector<std::optional<Tensor>> inputs;  // per hop: what it took in this attempt
  std::optional<Tensor> output;               // the last hop's output (push: it may come before the copies)
  bool fetching = false;                      // missing copies are being asked for
  bool recovering = false;
  std::optional<caf::actor_clock::time_point> fault;  // the step's first fault
  int faults = 0;
};

struct session_state {
  std::shared_ptr<const ClientHead> head;
  caf::actor head_batcher;  // the logits of generation steps (actors/client/head_batcher.hpp)
  caf::actor connector;
  caf::actor client;
  session_options opt;
  std::vector<session_hop> hops;
  uint64_t next_step = 1;
  uint64_t attempts = 0;
  std::shared_ptr<step_run> current;
  uint64_t next_timer = 1;
  std::map<uint64_t, std::function<void()>> timers;
  // Requests pending at gates that are not (yet) in the chain: opening a hop, replaying to a replacement. CAF
  // does not fail requests pending at a node that is gone, so the down handler fails them.
  struct down_watch {
    caf::actor_addr gate;
    std::function<void()> on_down;
  };
  uint64_t next_watch = 1;
  std::map<uint64_t, down_watch> watches;
  int64_t length = 0;           // positions used so far (batch 1 generation)
  std::vector<int32_t> tokens;  // every id fed so far, for the repetition penalty
  bool busy = false;
  session_stats stats;
  std::mt19937_64 rng;       // which steps are spot-checked (seeded from the options)
  inbound_streams inbound;   // verifiers' large replies arriving in chunks
  uint64_t next_stream = 1;  // numbers large verification requests sent in chunks
  static inline const char* name = "inference_session";
};

using session_actor = caf::stateful_actor<session_state>;

void after(session_actor* self, caf::timespan delay, std::function<void()> fn) {
  const uint64_t id = self->state.next_timer++;
  self->state.timers[id] = std::move(fn);
  self->delayed_send(self, delay, retry_atom::value, id);
}

// Latencies are measured on the actor clock (virtual time in the simulator), like every other time here.
double ms_since(session_actor* self, caf::actor_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(self->clock().now() - t0).count();
}

// Errors that say the request was wrong are the caller's; everything else is the server's (or the network's).
bool is_server_failure(const caf::error& e) { return !(is(e, errc::bad_request) || is(e, errc::max_length_exceeded)); }

std::string blocks_name(const planned_hop& h) { return "blocks " + block_span(h.first, h.last); }

// Tells the swarm client how a server did, by peer_id (its key, when its record named one).
void report(session_actor* self, const planned_hop& hop, bool ok, double latency_ms) {
  if (self->state.client) self->send(self->state.client, peer_report{peer_id(hop), ok, latency_ms, {}, false, 0});
}
void report_failure(session_actor* self, const planned_hop& hop, const caf::error& e) {
  if (self->state.client) self->send(self->state.client, failure_report(peer_id(hop), e));
}

caf::timespan retry_delay(int round) {
  return std::min<caf::timespan>(kFirstRetry * (int64_t{1} << std::min(round, 10)), kLongestRetry);
}

// `done`, called once: with the first of what the caller reports and the gate's node going down.
error_done settle_once_or_on_down(session_actor* self, const caf::actor& gate, const std::string& address,
                                  error_done done) {
  auto settled = std::make_shared<bool>(false);
  const uint64_t id = self->state.next_watch++;
  auto once = [self, id, settled, done = std::move(done)](caf::error e) {
    if (*settled) return;
    *settled = true;
    self->state.watches.erase(id);
    done(std::move(e));
  };
  self->state.watches[id] = {gate.address(), [once, address] {
                               once(make_error(errc::peer_unavailable, "server " + address + " went down"));
                             }};
  return once;
}

void close_hop(session_actor* self, const session_hop& h) {
  if (!h.gate) return;
  if (h.session_id) caf::anon_send(h.gate, close_session{h.session_id, {}});  // its ack is of no use
  self->demonitor(h.gate);
}

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

// Opens the replacement hops one by one and replays `history` through them (each hop's history becomes the
// inputs it took). On failure, names the replacement that failed.
using replacement_done = std::function<void(caf::error, planned_hop failed)>;

void build_replacements(session_actor* self, std::shared_ptr<std::vector<std::shared_ptr<session_hop>>> hops, size_t j,
                        std::vector<history_entry> inputs, replacement_done done) {
  if (j == hops->size()) return done(caf::error{}, {});
  auto hop = (*hops)[j];
  open_hop(self, hop, [=](caf::error e) {
    if (e) return done(std::move(e), hop->plan);
    auto outputs = std::make_shared<std::vector<history_entry>>();
    const auto t0 = self->clock().now();
    replay_through(self, hop, inputs, 0, outputs,
                   settle_once_or_on_down(self, hop->gate, hop->plan.address, [=](caf::error e) {
                     if (e) return done(std::move(e), hop->plan);
                     if (!inputs.empty()) report(self, hop->plan, true, ms_since(self, t0));
                     hop->history = inputs;
                     build_replacements(self, hops, j + 1, std::move(*outputs), done);
                   }));
  });
}

// Finds servers for the blocks of `failed`, opens them, replays the failed hop's history, and splices them into
// the chain at `k`. Retries with backoff until the deadline. The servers that failed in this recovery (the failed
// one first) are left out until none is left to try; then a new pass begins with all of them: a server that was
// restarted meanwhile is welcome again. Beyond those, the swarm client's bans (which each failure extends) keep
// failing servers away, and give way when nothing else covers the blocks.
void replace_span(session_actor* self, size_t k, std::shared_ptr<const session_hop> failed,
                  std::shared_ptr<std::set<std::string>> failed_here, caf::actor_clock::time_point deadline, int round,
                  error_done done) {
  auto& st = self->state;
  auto retry = [=](caf::error why) {
    const auto delay = retry_delay(round);
    if (self->clock().now() + delay > deadline)
      return done(make_error(errc::no_route, "found no working replacement for " + blocks_name(failed->plan) +
                                                 " in time; last problem: " + describe(why)));
    after(self, delay, [=] { replace_span(self, k, failed, failed_here, deadline, round + 1, done); });
  };
  const int64_t cache = st.opt.max_length * st.opt.batch;
  self->request(st.client, st.opt.request_timeout,
                replan_request{failed->plan.first, failed->plan.last, cache, *failed_here, st.opt.adapter, false})
      .then(
          [=](std::vector<planned_hop>& plan) {
            auto hops = std::make_shared<std::vector<std::shared_ptr<session_hop>>>();
            for (auto& p : plan) hops->push_back(std::make_shared<session_hop>(session_hop{p, {}, 0, false, {}}));
            build_replacements(self, hops, 0, merge_for_replay(failed->history), [=](caf::error e, planned_hop bad) {
              if (e) {
                for (auto& h : *hops) close_hop(self, *h);
                if (!is_server_failure(e)) return done(std::move(e));  // our own request: any server would refuse it
                failed_here->insert(peer_id(bad));
                self->state.stats.failures.push_back(bad.address + ": " + describe(e));
                report_failure(self, bad, e);
                return retry(std::move(e));
              }
              auto& hs = self->state.hops;
              hs.erase(hs.begin() + static_cast<std::ptrdiff_t>(k));
              std::vector<session_hop> fresh;
              for (auto& h : *hops) fresh.push_back(std::move(*h));
              hs.insert(hs.begin() + static_cast<std::ptrdiff_t>(k), std::make_move_iterator(fresh.begin()),
                        std::make_move_iterator(fresh.end()));
              done(caf::error{});
            });
          },
          [=](caf::error& e) {
            failed_here->clear();  // every candidate failed once: the next pass tries them all again
            retry(std::move(e));
          });
}

void recover_hop(session_actor* self, size_t k, caf::actor_clock::time_point deadline, error_done done) {
  auto failed = std::make_shared<const session_hop>(self->state.hops[k]);
  close_hop(self, *failed);
  auto failed_here = std::make_shared<std::set<std::string>>(std::set<std::string>{peer_id(failed->plan)});
  replace_span(self, k, failed, std::move(failed_here), deadline, 0, std::move(done));
}

// Opens every hop that has no session yet, replacing those that fail to open.
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

// --- steps -----------------------------------------------------------------------------------------------------

void attempt(session_actor* self, std::shared_ptr<step_run> run);

void finish(session_actor* self, std::shared_ptr<step_run> run, caf::expected<Tensor> out) {
  if (self->state.current == run) self->state.current.reset();
  run->done(std::move(out));
}

// The step went through (and passed its spot check, if it had one): each hop's input joins its history.
void commit(session_actor* self, std::shared_ptr<step_run> run, Tensor out) {
  auto& st = self->state;
  for (size_t i = 0; i < st.hops.size(); ++i) {
    reorder_sequences(st.hops[i].history, run->hypo_ids);  // as the servers reordered their caches
    st.hops[i].history.push_back({std::move(*run->inputs[i]), *run->positions});
  }
  ++st.stats.steps;
  if (run->fault) {
    const double seconds = std::chrono::duration<double>(self->clock().now() - *run->fault).count();
    st.stats.recovery_seconds.push_back(seconds);
    log::info(log::Part::session, [&] {
      std::string route;
      for (const auto& h : st.hops)
        route += (route.empty() ? "" : ", ") + h.plan.address + " " + block_span(h.plan.first, h.plan.last);
      return "failed over: in " + std::to_string(seconds) + " s; route now " + route;
    });
  }
  finish(self, run, std::move(out));
}

// --- spot checks (actors/client/spot_check.hpp) ------------------------------------------------------------------

void fail(session_actor* self, std::shared_ptr<step_run> run, size_t k, caf::error e);
bool stale(session_actor* self, const std::shared_ptr<step_run>& run, uint64_t a);

// The outputs of a verifier chain and the servers that computed them.
struct recomputation {
  Tensor hidden;                   // [B, T, D]: every token of the forward
  std::vector<planned_hop> chain;  // the verifier's hops
};
using recomputation_done = std::function<void(caf::expected<recomputation>)>;

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

// The coarsest tolerance of the dtypes of `hop` and of a verifier chain.
double tolerance_for(const planned_hop& hop, const std::vector<planned_hop>& chain) {
  double t = output_tolerance(hop.dtype, hop.dtype);
  for (const auto& v : chain) t = std::max(t, output_tolerance(hop.dtype, v.dtype));
  return t;
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

// The step's hop k lied (its output disagrees with recomputations): the step runs again under a new id, so that
// the servers after it, which took the wrong output in, recompute instead of answering from their last output.
void caught(session_actor* self, std::shared_ptr<step_run> run, size_t k, const std::string& why) {
  auto& st = self->state;
  ++st.stats.wrong_outputs;
  run->step = st.next_step++;
  fail(self, run, k,
       make_error(errc::wrong_output,
                  "server " + st.hops[k].plan.address + " (" + blocks_name(st.hops[k].plan) + "): " + why));
}

// Checks hop k of the step: recomputes its history and this step's input elsewhere and compares. When they
// disagree, a second verifier decides who is wrong; with none to ask, the checked server is.
void spot_check(session_actor* self, std::shared_ptr<step_run> run, std::vector<size_t> hops, size_t i, Tensor out) {
  auto& st = self->state;
  if (i == hops.size()) return commit(self, run, std::move(out));
  const size_t k = hops[i];
  auto next = [=]() mutable { spot_check(self, run, hops, i + 1, std::move(out)); };
  const session_hop& hop = st.hops[k];
  std::vector<history_entry> history = hop.history;  // as the hop's cache holds it for this step
  reorder_sequences(history, run->hypo_ids);
  auto input = verification_input(history, {*run->inputs[k], *run->positions});
  if (!input) return next();
  const Tensor claimed = k + 1 < st.hops.size() ? *run->inputs[k + 1] : out;
  const int64_t tokens = run->input.dim(1);
  const uint64_t a = run->attempt;
  const planned_hop plan = hop.plan;
  std::set<std::string> avoid{peer_id(plan)};
  recompute(self, plan, *input, avoid, [=](caf::expected<recomputation> first) mutable {
    if (stale(self, run, a)) return;
    if (!first) {
      // Nobody else covers these blocks now, or the verifier failed: the step stays unchecked, and the hop is no
      // longer checked on every step for being new (it still comes up at the usual rate).
      self->state.hops[k].plan.unchecked = false;
      return next();
    }
    const std::string diff =
        compare_outputs(claimed, last_tokens(first->hidden, tokens), tolerance_for(plan, first->chain));
    if (diff.empty()) {
      passed_check(self, k);
      return next();
    }
    for (const auto& v : first->chain) avoid.insert(peer_id(v));
    recompute(self, plan, *input, avoid, [=](caf::expected<recomputation> second) mutable {
      if (stale(self, run, a)) return;
      if (second &&
          compare_outputs(claimed, last_tokens(second->hidden, tokens), tolerance_for(plan, second->chain)).empty()) {
        // The first verifier was the liar.
        for (const auto& v : first->chain)
          if (self->state.client)
            self->send(self->state.client, failure_report(peer_id(v), make_error(errc::wrong_output,
                                                                                 "a spot check it answered "
                                                                                 "disagreed with two servers")));
        passed_check(self, k);
        return next();
      }
      caught(self, run, k, diff);
    });
  });
}

// The step's hops are done: spot-check some of them (spot_check.hpp), one after the other, then commit.
void complete(session_actor* self, std::shared_ptr<step_run> run, Tensor out) {
  auto& st = self->state;
  if (!st.client) return commit(self, run, std::move(out));
  std::vector<bool> unchecked;
  for (const auto& h : st.hops) unchecked.push_back(h.plan.unchecked);
  spot_check(self, run, hops_to_check(st.opt.spot_checks, unchecked, st.rng), 0, std::move(out));
}

// Hop `k` failed this step: ban it, replace it, run the step again. Errors that are the request's own end the
// step.
void fail(session_actor* self, std::shared_ptr<step_run> run, size_t k, caf::error e) {
  auto& st = self->state;
  if (!is_server_failure(e)) return finish(self, run, std::move(e));
  if (!run->fault) run->fault = self->clock().now();
  const std::string address = st.hops[k].plan.address;
  st.stats.failures.push_back(address + ": " + describe(e));
  log::warn(log::Part::session, [&] { return "server failed: " + address + "; " + describe(e) + "; replacing it"; });
  report_failure(self, st.hops[k].plan, e);
  const auto deadline = *run->fault + st.opt.recovery_timeout;
  const int earlier = run->faults++;
  const caf::timespan delay = earlier == 0 ? caf::timespan{0} : retry_delay(earlier - 1);
  if (self->clock().now() + delay >= deadline)
    return finish(
        self, run,
        make_error(errc::no_route, "no working route for the step within the recovery timeout (" +
                                       std::to_string(run->faults) + " server failures); the last: " + describe(e)));
  run->attempt = ++st.attempts;  // whatever the failed attempt still sends back is ignored
  run->recovering = true;
  auto recover = [=] {
    recover_hop(self, k, deadline, [=](caf::error err) {
      run->recovering = false;
      if (self->state.current != run) return;
      if (err) return finish(self, run, std::move(err));
      attempt(self, run);
    });
  };
  if (delay == caf::timespan{0})
    recover();
  else
    after(self, delay, recover);
}

bool stale(session_actor* self, const std::shared_ptr<step_run>& run, uint64_t a) {
  return self->state.current != run || run->attempt != a || run->recovering;
}

void relay(session_actor* self, std::shared_ptr<step_run> run, size_t i, Tensor hidden) {
  auto& st = self->state;
  if (i == st.hops.size()) return complete(self, run, std::move(hidden));
  run->inputs[i] = hidden;
  const uint64_t a = run->attempt;
  const auto t0 = self->clock().now();
  step_request req{st.hops[i].session_id, run->step, std::move(hidden), *run->positions, {}, {}, run->hypo_ids};
  self->request(st.hops[i].gate, st.opt.request_timeout, std::move(req))
      .then(
          [=](step_reply& r) {
            if (stale(self, run, a)) return;
            if (!r.wire_error.empty())
              return fail(self, run, i, make_error(errc::peer_unavailable, "garbled reply: " + r.wire_error));
            report(self, self->state.hops[i].plan, true, ms_since(self, t0));
            relay(self, run, i + 1, std::move(r.hidden));
          },
          [=](caf::error& e) {
            if (!stale(self, run, a)) fail(self, run, i, std::move(e));
          });
}

// In a push step, the hop that has not sent its output copy is the one that failed (each server sends its copy
// before it forwards); when every copy is in, the last hop failed.
size_t suspect(session_actor* self, const step_run& run) {
  const size_t n = self->state.hops.size();
  for (size_t i = 1; i < n; ++i)
    if (!run.inputs[i]) return i - 1;
  return n - 1;
}

void try_complete(session_actor* self, std::shared_ptr<step_run> run);

// Asks hop j-1 again for its output (the same step id: it answers from its last output), the input of hop j.
void fetch_copy(session_actor* self, std::shared_ptr<step_run> run, size_t j) {
  auto& st = self->state;
  const uint64_t a = run->attempt;
  step_request req{st.hops[j - 1].session_id, run->step, *run->inputs[j - 1], *run->positions, {}, {}, run->hypo_ids};
  self->request(st.hops[j - 1].gate, st.opt.request_timeout, std::move(req))
      .then(
          [=](step_reply& r) {
            if (stale(self, run, a)) return;
            if (!r.wire_error.empty())
              return fail(self, run, j - 1, make_error(errc::peer_unavailable, "garbled reply: " + r.wire_error));
            run->inputs[j] = std::move(r.hidden);
            run->fetching = false;
            try_complete(self, run);
          },
          [=](caf::error& e) {
            if (!stale(self, run, a)) fail(self, run, j - 1, std::move(e));
          });
}

void try_complete(session_actor* self, std::shared_ptr<step_run> run) {
  size_t missing = 0;
  for (size_t i = 1; i < run->inputs.size() && !missing; ++i)
    if (!run->inputs[i]) missing = i;
  if (!missing) return complete(self, run, *run->output);
  if (run->fetching) return;
  run->fetching = true;
  const uint64_t a = run->attempt;
  after(self, kCopyGrace, [=] {
    if (stale(self, run, a)) return;
    size_t j = 0;
    for (size_t i = 1; i < run->inputs.size() && !j; ++i)
      if (!run->inputs[i]) j = i;
    if (!j) return complete(self, run, *run->output);
    fetch_copy(self, run, j);
  });
}

// A push step's chain moves hop by hop, each forwarding server sending the client a copy of its output: when no
// new copy (nor the output) came for a request timeout, the chain has stalled at the hop after the last copy (a
// message lost, a server gone silent). That hop fails as a relayed hop that does not answer in time would;
// waiting for the whole chain's deadline (a request timeout per hop) stalled sessions for minutes. The timer holds
// the step weakly: steps end long before it fires.
void watch_push(session_actor* self, const std::shared_ptr<step_run>& run, uint64_t a, size_t copies) {
  std::weak_ptr<step_run> weak = run;
  after(self, self->state.opt.request_timeout, [=] {
    auto run = weak.lock();
    if (!run || stale(self, run, a) || run->output) return;
    const auto now = static_cast<size_t>(
        std::count_if(run->inputs.begin(), run->inputs.end(), [](const auto& i) { return i.has_value(); }));
    if (now > copies) return watch_push(self, run, a, now);
    const size_t k = suspect(self, *run);
    fail(self, run, k,
         make_error(errc::peer_unavailable, "the push chain stalled at " + self->state.hops[k].plan.address +
                                                ": no output within the request timeout"));
  });
}

void push(session_actor* self, std::shared_ptr<step_run> run) {
  auto& st = self->state;
  step_request req{st.hops[0].session_id, run->step, run->input, *run->positions, {}, {}, run->hypo_ids};
  for (size_t i = 1; i < st.hops.size(); ++i) req.next.push_back({st.hops[i].plan.address, st.hops[i].session_id});
  const uint64_t a = run->attempt;
  const auto t0 = self->clock().now();
  self->request(st.hops[0].gate, st.opt.request_timeout * static_cast<int64_t>(st.hops.size()), std::move(req))
      .then(
          [=](step_reply& r) {
            if (stale(self, run, a)) return;
            if (!r.wire_error.empty())
              return fail(self, run, suspect(self, *run),
                          make_error(errc::peer_unavailable, "garbled reply: " + r.wire_error));
            const double per_hop = ms_since(self, t0) / static_cast<double>(self->state.hops.size());
            for (auto& h : self->state.hops) report(self, h.plan, true, per_hop);
            run->output = std::move(r.hidden);
            try_complete(self, run);
          },
          [=](caf::error& e) {
            if (!stale(self, run, a)) fail(self, run, suspect(self, *run), std::move(e));
          });
  watch_push(self, run, a, 1);
}

void attempt(session_actor* self, std::shared_ptr<step_run> run) {
  auto& st = self->state;
  run->attempt = ++st.attempts;
  for (size_t k = 0; k < st.hops.size(); ++k)
    if (st.hops[k].down)
      return fail(self, run, k, make_error(errc::peer_unavailable, "server " + st.hops[k].plan.address + " went down"));
  run->inputs.assign(st.hops.size(), std::nullopt);
  run->inputs[0] = run->input;
  run->output.reset();
  run->fetching = false;
  if (st.opt.mode == route_mode::push && st.hops.size() > 1)
    push(self, run);
  else
    relay(self, run, 0, run->input);
}

void run_route(session_actor* self, Tensor hidden, std::vector<int32_t> positions, tensor_done done,
               std::vector<int32_t> hypo_ids = {}) {
  auto run = std::make_shared<step_run>();
  run->step = self->state.next_step++;
  run->input = std::move(hidden);
  run->positions = std::make_shared<const std::vector<int32_t>>(std::move(positions));
  run->hypo_ids = std::move(hypo_ids);
  run->done = std::move(done);
  self->state.current = run;
  attempt(self, run);
}

// --- generation ------------------------------------------------------------------------------------------------

struct generation {
  caf::typed_response_promise<generate_result> rp;
  std::unique_ptr<TokenGeneration> tokens;
  caf::actor_clock::time_point start;
};

// Embeddings of `ids`, after the tuned prompt embeddings `prefix` [P, D] when there are some: [1, P + T, D].
Tensor embed_after(const ClientHead& head, const std::vector<int32_t>& ids, const Tensor& prefix) {
  Tensor embeds = head.backend().download(head.embed(ids, 1));
  if (!prefix.defined()) return embeds;
  const int64_t p = prefix.dim(0), t = embeds.dim(1), d = embeds.dim(2);
  Tensor out = Tensor::empty(DType::f32, {1, p + t, d});
  std::memcpy(out.data(), prefix.data(), static_cast<size_t>(prefix.nbytes()));
  std::memcpy(out.data_as<float>() + p * d, embeds.data(), static_cast<size_t>(embeds.nbytes()));
  return out;
}

void end_generation(session_actor* self, const std::shared_ptr<generation>& g, caf::expected<generate_result> r) {
  self->state.busy = false;
  if (!r) {
    g->rp.deliver(r.error());
    return;
  }
  r->seconds = std::chrono::duration<double>(self->clock().now() - g->start).count();
  g->rp.deliver(std::move(*r));
}

// One step of the generation loop (model/generation.hpp's run_generation, a continuation per step): feeds `ids`
// through the route, asks the head for the logits of the last one, and lets the generation choose the next token;
// goes on with it or ends (the ending token is not fed: the session holds every token but it).
void generate_step(session_actor* self, std::shared_ptr<generation> g, std::vector<int32_t> ids,
                   Tensor prefix = Tensor()) {
  auto& st = self->state;
  Tensor hidden;
  try {
    hidden = embed_after(*st.head, ids, prefix);
  } catch (const std::exception& e) {
    return end_generation(self, g, make_error(errc::bad_request, e.what()));
  }
  std::vector<int32_t> positions(static_cast<size_t>(hidden.dim(1)));
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(st.length));
  run_route(self, hidden, positions, [=](caf::expected<Tensor> out) {
    auto& st = self->state;
    if (!out) return end_generation(self, g, out.error());
    st.length += static_cast<int64_t>(positions.size());
    st.tokens.insert(st.tokens.end(), ids.begin(), ids.end());
    const int64_t t = out->dim(1), d = out->dim(2);
    self->request(st.head_batcher, caf::infinite, head_rows{out->reshaped({t, d}).slice_rows(t - 1, t)})
        .then(
            [=](const Tensor& logits) {
              TokenGeneration& tokens = *g->tokens;
              if (tokens.advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())}))
                return generate_step(self, g, {tokens.last()});
              end_generation(self, g, generate_result{tokens.tokens(), 0, tokens.end()});
            },
            [=](caf::error& e) { end_generation(self, g, std::move(e)); });
  });
}

// Beam search (model/beam_search.hpp): the session's num_beams sequences are the beams. The prompt goes to all
// of them at once; each step feeds every running beam its next token, with the step's hypothesis ids reordering
// the servers' caches (and the session's histories) as the search moved the beams.
struct beam_generation {
  caf::typed_response_promise<generate_result> rp;
  generate_request req;
  std::unique_ptr<BeamSearch> search;
  int64_t prompt_length = 0;
  caf::actor_clock::time_point start;
};

void beam_step(session_actor* self, std::shared_ptr<beam_generation> g, const std::vector<int32_t>& ids,
               std::vector<int32_t> positions, std::vector<int32_t> sources) {
  auto& st = self->state;
  const int64_t beams = g->req.params.num_beams, t = static_cast<int64_t>(ids.size()) / beams;
  auto fail = [self, g](caf::error e) {
    self->state.busy = false;
    g->rp.deliver(std::move(e));
  };
  Tensor hidden;
  try {
    hidden = st.head->backend().download(st.head->embed(ids, beams));
  } catch (const std::exception& e) {
    return fail(make_error(errc::bad_request, e.what()));
  }
  run_route(
      self, hidden, std::move(positions),
      [=](caf::expected<Tensor> out) {
        auto& st = self->state;
        if (!out) return fail(out.error());
        st.length += t;
        const int64_t d = out->dim(2);
        Tensor last = Tensor::empty(DType::f32, {beams, d});  // each beam's last token
        for (int64_t b = 0; b < beams; ++b)
          std::memcpy(last.data_as<float>() + b * d, out->data_as<const float>() + ((b + 1) * t - 1) * d,
                      static_cast<size_t>(d) * sizeof(float));
        self->request(st.head_batcher, caf::infinite, head_rows{last})
            .then(
                [=](const Tensor& logits) {
                  BeamSearch::Step next;
                  try {
                    next = g->search->advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())},
                                              logits.dim(1));
                  } catch (const std::exception& e) {
                    return fail(make_error(errc::internal, e.what()));
                  }
                  if (next.done) {
                    self->state.busy = false;
                    const std::vector<int32_t>& best = g->search->best();
                    GenerationEnd end = GenerationEnd::length;
                    const auto eos = end_tokens(g->req.params, self->state.head->config());
                    if (!best.empty() && std::find(eos.begin(), eos.end(), best.back()) != eos.end())
                      end = GenerationEnd::end_token;
                    for (int32_t id : best) {
                      if (g->req.subscriber) self->send(g->req.subscriber, token_atom::value, id);
                      if (g->req.on_token && !g->req.on_token(id)) {
                        end = GenerationEnd::stopped;
                        break;
                      }
                    }
                    const double secs = std::chrono::duration<double>(self->clock().now() - g->start).count();
                    g->rp.deliver(generate_result{best, secs, end});
                    return;
                  }
                  const auto at = static_cast<int32_t>(g->prompt_length + g->search->generated() - 1);
                  beam_step(self, g, next.tokens, std::vector<int32_t>(static_cast<size_t>(beams), at),
                            std::move(next.sources));
                },
                [=](caf::error& e) { fail(std::move(e)); });
      },
      std::move(sources));
}

// Why a beam search of `req` cannot run in this session (none: it can): it needs a fresh session of num_beams
// sequences.
caf::error beam_search_refusal(const session_state& st, const generate_request& req) {
  const GenerationParams& p = req.params;
  if (auto problem = generation_problem(p); !problem.empty()) return make_error(errc::bad_request, problem);
  if (st.opt.batch != p.num_beams)
    return make_error(errc::bad_request, "a beam search of " + std::to_string(p.num_beams) +
                                             " beams runs in a session of as many sequences; this one has " +
                                             std::to_string(st.opt.batch));
  if (st.length > 0 || req.prefix.defined())
    return make_error(errc::bad_request, "a beam search starts a session (no tokens before its prompt)");
  return {};
}

// Starts a beam search over the prompt (beam_search_refusal said it can run).
void start_beam_search(session_actor* self, std::shared_ptr<beam_generation> g) {
  auto& st = self->state;
  const GenerationParams& p = g->req.params;
  g->search = std::make_unique<BeamSearch>(beam_search_params(p, st.head->config()));
  g->prompt_length = static_cast<int64_t>(g->req.prompt.size());
  BeamPrompt first = beam_prompt(g->req.prompt, p.num_beams);
  st.busy = true;
  beam_step(self, g, first.ids, std::move(first.positions), {});
}

caf::behavior inference_session(session_actor* self, std::shared_ptr<const ClientHead> head, caf::actor head_batcher,
                                caf::actor connector, caf::actor client, session_options opt,
                                std::vector<planned_hop> route) {
  auto& st = self->state;
  st.head = std::move(head);
  st.head_batcher = std::move(head_batcher);
  st.connector = std::move(connector);
  st.client = std::move(client);
  st.opt = opt;
  st.rng.seed(opt.seed);
  st.inbound = inbound_streams(st.opt.streams);
  for (auto& h : route) st.hops.push_back({h, {}, 0, false, {}});
  // A server's node going down (killed, or frozen past the middleman's heartbeat timeout) fails the step in
  // flight at once: CAF does not fail requests pending at a node that is gone.
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    std::optional<size_t> first;
    for (size_t k = 0; k < st.hops.size(); ++k)
      if (st.hops[k].gate && st.hops[k].gate.address() == m.source) {
        st.hops[k].down = true;
        if (!first) first = k;
      }
    std::vector<std::function<void()>> watching;
    for (auto& [id, w] : st.watches)
      if (w.gate == m.source) watching.push_back(w.on_down);
    for (auto& on_down : watching) on_down();  // each removes its own watch
    auto run = st.current;
    if (first && run && !run->recovering)
      fail(self, run, *first,
           make_error(errc::peer_unavailable,
                      "server " + st.hops[*first].plan.address + " went down (" + caf::to_string(m.reason) + ")"));
  });
  // If the session dies without close_atom, each server notices (it monitors the session) and frees its part.
  return {
      [=](open_atom) -> caf::result<ack> {
        auto rp = self->make_response_promise<ack>();
        open_route(self, [=](caf::error e) mutable {
          if (e) {
            log::info(log::Part::session, [&] { return "open failed: " + describe(e); });
            rp.deliver(std::move(e));
            return;
          }
          log::info(log::Part::session, [&] {
            std::string route;
            for (const auto& h : self->state.hops)
              route += (route.empty() ? "" : ", ") + h.plan.address + " " + block_span(h.plan.first, h.plan.last);
            return "opened: route " + route;
          });
          rp.deliver(ack{});
        });
        return rp;
      },
      [=](step_input& in) -> caf::result<Tensor> {
        if (self->state.current) return make_error(errc::bad_request, "a step is already running in this session");
        if (!in.hypo_ids.empty()) {  // checked here too: the history is reordered by them once the step is in
          const int64_t b = in.hidden.rank() == 3 ? in.hidden.dim(0) : 0;
          if (auto problem = hypothesis_ids_problem(in.hypo_ids, b); !problem.empty())
            return make_error(errc::bad_request, problem);
        }
        auto rp = self->make_response_promise<Tensor>();
        run_route(
            self, std::move(in.hidden), std::move(in.positions),
            [=](caf::expected<Tensor> out) mutable {
              if (out)
                rp.deliver(std::move(*out));
              else
                rp.deliver(out.error());
            },
            std::move(in.hypo_ids));
        return rp;
      },
      [=](generate_request& req) -> caf::result<generate_result> {
        auto& st = self->state;
        if (st.busy || st.current)
          return make_error(errc::bad_request, "a generation is already running in this session");
        if (req.prompt.empty()) return make_error(errc::bad_request, "the prompt is empty");
        const int64_t prefix = req.prefix.defined() ? req.prefix.dim(0) : 0;
        if (req.prefix.defined()) {
          if (req.prefix.dtype() != DType::f32 || req.prefix.rank() != 2 ||
              req.prefix.dim(1) != st.head->config().hidden_size)
            return make_error(errc::bad_request, "tuned prompts must be f32[length, " +
                                                     std::to_string(st.head->config().hidden_size) + "], got " +
                                                     req.prefix.describe());
          if (st.length > 0)
            return make_error(errc::bad_request, "tuned prompts go at the start of a session, which holds " +
                                                     std::to_string(st.length) + " tokens already");
        }
        // Positions the generation takes: the prompt's, and one per new token but the last, which is drawn from
        // the last step and never fed here (a session of max_length holds max_length tokens, as in Petals).
        const int64_t need = st.length + prefix + static_cast<int64_t>(req.prompt.size()) +
                             std::max<int64_t>(req.params.max_new_tokens - 1, 0);
        if (need > st.opt.max_length)
          return make_error(errc::max_length_exceeded, "the session holds " + std::to_string(st.length) + " tokens; " +
                                                           std::to_string(req.prompt.size()) + " more and " +
                                                           std::to_string(req.params.max_new_tokens) +
                                                           " new ones (all but the last fed) exceed its max_length " +
                                                           std::to_string(st.opt.max_length));
        if (req.params.num_beams != 1) {
          if (auto refusal = beam_search_refusal(st, req)) return refusal;
          auto beams = std::make_shared<beam_generation>();
          beams->rp = self->make_response_promise<generate_result>();
          beams->start = self->clock().now();
          beams->req = std::move(req);
          start_beam_search(self, beams);
          return beams->rp;
        }
        auto g = std::make_shared<generation>();
        std::vector<int32_t> history = st.tokens;
        history.insert(history.end(), req.prompt.begin(), req.prompt.end());
        TokenCallback on_token = req.on_token;
        if (req.subscriber)
          on_token = [self, subscriber = req.subscriber, then = std::move(on_token)](int32_t id) {
            self->send(subscriber, token_atom::value, id);
            return !then || then(id);
          };
        try {
          g->tokens = std::make_unique<TokenGeneration>(req.params, end_tokens(req.params, st.head->config()),
                                                        std::move(history), std::move(on_token));
        } catch (const std::exception& e) {
          return make_error(errc::bad_request, e.what());
        }
        g->rp = self->make_response_promise<generate_result>();
        g->start = self->clock().now();
        std::vector<int32_t> prompt = std::move(req.prompt);
        Tensor prefix_embeddings = std::move(req.prefix);
        st.busy = true;
        generate_step(self, g, std::move(prompt), std::move(prefix_embeddings));
        return g->rp;
      },
      // A forwarding server's copy of its output (push mode): the next hop's input, kept for its history.
      [=](step_reply& copy) {
        auto& st = self->state;
        auto run = st.current;
        if (!run || copy.step_id != run->step || !copy.wire_error.empty() || run->recovering) return;
        for (size_t j = 0; j + 1 < st.hops.size() && j + 1 < run->inputs.size(); ++j)
          if (st.hops[j].session_id == copy.session_id) {
            run->inputs[j + 1] = std::move(copy.hidden);
            break;
          }
        if (run->output) try_complete(self, run);
      },
      [=](retry_atom, uint64_t id) {
        auto it = self->state.timers.find(id);
        if (it == self->state.timers.end()) return;
        auto fn = std::move(it->second);
        self->state.timers.erase(it);
        fn();
      },
      [=](route_atom) -> std::vector<std::string> {
        std::vector<std::string> out;
        for (auto& h : self->state.hops) out.push_back(h.plan.address + " " + block_span(h.plan.first, h.plan.last));
        return out;
      },
      [=](stats_atom) -> session_stats { return self->state.stats; },
      // Verifiers' large replies, in chunks (actors/protocol/wire_stream.hpp).
      [=](const wire_chunk& chunk) { return receive_chunk(self, self->state.inbound, chunk); },
      [=](stream_sweep_atom) { sweep_streams(self, self->state.inbound); },
      [=](close_atom) {
        log::info(log::Part::session, [&] {
          const auto& s = self->state.stats;
          return "closed: steps " + std::to_string(s.steps) + "; server failures " + std::to_string(s.failures.size());
        });
        for (auto& h : self->state.hops) close_hop(self, h);
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_inference_session(caf::actor_system& sys, std::shared_ptr<const ClientHead> head,
                                   caf::actor head_batcher, caf::actor connector, caf::actor client,
                                   session_options options, std::vector<planned_hop> route) {
  return sys.spawn(inference_session, std::move(head), std::move(head_batcher), std::move(connector), std::move(client),
                   options, std::move(route));
}

}  // namespace corolla
