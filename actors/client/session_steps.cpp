// A step through the route: relayed hop by hop by the session, or pushed (the first server forwards to the next,
// each sending the session a copy of its output); a hop that fails is replaced (session_recovery.cpp) and the step
// runs again; the hops' outputs are spot-checked (session_spot_checks.cpp) before the step commits.
#include <caf/all.hpp>
#include <algorithm>

#include "actors/client/server_output.hpp"
#include "actors/client/session_state.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla::session {
namespace {

// How long a push step waits for the forwarding servers' output copies after the last server replied, before
// asking those servers again (they answer a repeated step id from their last output).
constexpr auto kCopyGrace = std::chrono::milliseconds(200);

void attempt(session_actor* self, std::shared_ptr<step_run> run);

void finish(session_actor* self, std::shared_ptr<step_run> run, caf::expected<Tensor> out) {
  if (self->state.current == run) self->state.current.reset();
  run->done(std::move(out));
}

}  // namespace

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

namespace {

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
            if (auto e =
                    malformed_output(r.hidden, run->input.shape(), self->state.hops[i].plan.address, "hidden states"))
              return fail(self, run, i, std::move(e));
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
            if (auto e = malformed_output(r.hidden, run->input.shape(), self->state.hops[j - 1].plan.address,
                                          "hidden states"))
              return fail(self, run, j - 1, std::move(e));
            run->inputs[j] = std::move(r.hidden);
            run->fetching = false;
            try_complete(self, run);
          },
          [=](caf::error& e) {
            if (!stale(self, run, a)) fail(self, run, j - 1, std::move(e));
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
            // The last hop's output: a malformed one is that hop's failure.
            const size_t last = self->state.hops.size() - 1;
            if (auto e = malformed_output(r.hidden, run->input.shape(), self->state.hops[last].plan.address,
                                          "hidden states"))
              return fail(self, run, last, std::move(e));
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

}  // namespace

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

void run_route(session_actor* self, Tensor hidden, std::vector<int32_t> positions, tensor_done done,
               std::vector<int32_t> hypo_ids) {
  auto run = std::make_shared<step_run>();
  run->step = self->state.next_step++;
  run->input = std::move(hidden);
  run->positions = std::make_shared<const std::vector<int32_t>>(std::move(positions));
  run->hypo_ids = std::move(hypo_ids);
  run->done = std::move(done);
  self->state.current = run;
  attempt(self, run);
}

}  // namespace corolla::session
