#include "actors/client/inference_session.hpp"

#include <caf/all.hpp>

#include "actors/client/server_output.hpp"
#include "actors/client/session_state.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "model/kv_pool.hpp"

namespace corolla {
namespace session {
namespace {

inference_session_internal::behavior_type inference_session(session_actor* self, std::shared_ptr<const ClientHead> head,
                                                            caf::actor head_batcher, caf::actor connector,
                                                            swarm_client_internal client, session_options opt,
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
      [=](generate_request& req) { return start_generation(self, req); },
      // A forwarding server's copy of its output (push mode): the next hop's input, kept for its history.
      [=](step_reply& copy) {
        auto& st = self->state;
        auto run = st.current;
        if (!run || copy.step_id != run->step || !copy.wire_error.empty() || run->recovering) return;
        // A malformed copy is left out: the hop that sent it then counts as stalled (watch_push) and is replaced.
        if (malformed_output(copy.hidden, run->input.shape(), {}, {})) return;
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
}  // namespace session

inference_session_internal spawn_inference_session(caf::actor_system& sys, std::shared_ptr<const ClientHead> head,
                                                   caf::actor head_batcher, caf::actor connector,
                                                   swarm_client_internal client, session_options options,
                                                   std::vector<planned_hop> route) {
  return sys.spawn(session::inference_session, std::move(head), std::move(head_batcher), std::move(connector),
                   std::move(client), options, std::move(route));
}

}  // namespace corolla
