#include "actors/client/inference_session.hpp"

#include <caf/all.hpp>
#include <numeric>

#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct session_hop {
  planned_hop plan;
  caf::actor gate;
  uint64_t session_id = 0;
};

struct session_state {
  std::shared_ptr<const ClientHead> head;
  caf::actor connector;
  session_options opt;
  std::vector<session_hop> hops;
  uint64_t next_step = 1;
  int64_t length = 0;            // positions used so far (batch 1 generation)
  std::vector<int32_t> tokens;   // every id fed so far, for the repetition penalty
  bool busy = false;
  static inline const char* name = "inference_session";
};

using session_actor = caf::stateful_actor<session_state>;
using tensor_done = std::function<void(caf::expected<Tensor>)>;

void open_hops(session_actor* self, size_t i, std::function<void(caf::error)> done) {
  auto& st = self->state;
  if (i == st.hops.size()) {
    done(caf::error{});
    return;
  }
  const planned_hop plan = st.hops[i].plan;
  self->request(st.connector, st.opt.request_timeout, resolve_atom::value, plan.address)
      .then(
          [=](caf::actor gate) {
            self->state.hops[i].gate = gate;
            open_session req{self->state.opt.max_length, self->state.opt.batch, plan.first, plan.last,
                             self->state.opt.adapter, {}};
            self->request(gate, self->state.opt.request_timeout, std::move(req))
                .then(
                    [=](const session_opened& r) {
                      self->state.hops[i].session_id = r.session_id;
                      open_hops(self, i + 1, done);
                    },
                    [=](caf::error& e) { done(e); });
          },
          [=](caf::error& e) { done(e); });
}

// Client relay: hop by hop, the client sending each server's output to the next.
void relay(session_actor* self, size_t i, uint64_t step, Tensor hidden, std::shared_ptr<std::vector<int32_t>> pos,
           tensor_done done) {
  auto& st = self->state;
  if (i == st.hops.size()) {
    done(std::move(hidden));
    return;
  }
  step_request req{st.hops[i].session_id, step, std::move(hidden), *pos, {}, {}};
  self->request(st.hops[i].gate, st.opt.request_timeout, std::move(req))
      .then(
          [=](step_reply& r) {
            if (!r.wire_error.empty()) return done(make_error(errc::bad_request, r.wire_error));
            relay(self, i + 1, step, std::move(r.hidden), pos, done);
          },
          [=](caf::error& e) { done(e); });
}

// Server-to-server push: the first server gets the whole route; the last one replies.
void push(session_actor* self, uint64_t step, Tensor hidden, std::shared_ptr<std::vector<int32_t>> pos,
          tensor_done done) {
  auto& st = self->state;
  step_request req{st.hops[0].session_id, step, std::move(hidden), *pos, {}, {}};
  for (size_t i = 1; i < st.hops.size(); ++i) req.next.push_back({st.hops[i].plan.address, st.hops[i].session_id});
  self->request(st.hops[0].gate, st.opt.request_timeout * static_cast<int64_t>(st.hops.size()), std::move(req))
      .then(
          [=](step_reply& r) {
            if (!r.wire_error.empty()) return done(make_error(errc::bad_request, r.wire_error));
            done(std::move(r.hidden));
          },
          [=](caf::error& e) { done(e); });
}

void run_route(session_actor* self, Tensor hidden, std::vector<int32_t> positions, tensor_done done) {
  auto pos = std::make_shared<std::vector<int32_t>>(std::move(positions));
  const uint64_t step = self->state.next_step++;
  if (self->state.opt.mode == route_mode::push && self->state.hops.size() > 1)
    push(self, step, std::move(hidden), pos, std::move(done));
  else
    relay(self, 0, step, std::move(hidden), pos, std::move(done));
}

struct generation {
  caf::typed_response_promise<generate_result> rp;
  generate_request req;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> out;
  caf::actor_clock::time_point start;
};

void generate_step(session_actor* self, std::shared_ptr<generation> g, std::vector<int32_t> ids) {
  auto& st = self->state;
  Tensor hidden;
  try {
    hidden = st.head->embed(ids, 1);
  } catch (const std::exception& e) {
    st.busy = false;
    g->rp.deliver(make_error(errc::bad_request, e.what()));
    return;
  }
  std::vector<int32_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(st.length));
  run_route(self, hidden, positions, [=](caf::expected<Tensor> out) {
    auto& st = self->state;
    if (!out) {
      st.busy = false;
      g->rp.deliver(out.error());
      return;
    }
    st.length += static_cast<int64_t>(ids.size());
    st.tokens.insert(st.tokens.end(), ids.begin(), ids.end());
    const int64_t t = out->dim(1), d = out->dim(2);
    Tensor logits = st.head->logits(out->reshaped({t, d}).slice_rows(t - 1, t));
    const int32_t next = g->sampler->next({logits.data_as<const float>(), static_cast<size_t>(logits.numel())},
                                          st.tokens);
    g->out.push_back(next);
    if (g->req.subscriber) self->send(g->req.subscriber, token_atom::value, next);
    const auto& eos = st.head->config().eos_token_ids;
    const bool at_eos = g->req.params.stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end();
    if (at_eos || static_cast<int64_t>(g->out.size()) >= g->req.params.max_new_tokens) {
      // The last token is not fed back: the session holds every token but it, as after any generation.
      st.busy = false;
      const double secs = std::chrono::duration<double>(self->clock().now() - g->start).count();
      g->rp.deliver(generate_result{g->out, secs});
      return;
    }
    generate_step(self, g, {next});
  });
}

caf::behavior inference_session(session_actor* self, std::shared_ptr<const ClientHead> head, caf::actor connector,
                                session_options opt, std::vector<planned_hop> route) {
  auto& st = self->state;
  st.head = std::move(head);
  st.connector = std::move(connector);
  st.opt = opt;
  for (auto& h : route) st.hops.push_back({h, {}, 0});
  auto close_all = [=] {
    for (auto& h : self->state.hops)
      if (h.gate && h.session_id) self->send(h.gate, close_session{h.session_id, {}});
  };
  // If the session dies without close_atom, each server notices (it monitors the session) and frees its part.
  return {
      [=](open_atom) -> caf::result<ack> {
        auto rp = self->make_response_promise<ack>();
        open_hops(self, 0, [=](caf::error e) mutable {
          if (e) rp.deliver(std::move(e));
          else rp.deliver(ack{});
        });
        return rp;
      },
      [=](step_input& in) -> caf::result<Tensor> {
        auto rp = self->make_response_promise<Tensor>();
        run_route(self, std::move(in.hidden), std::move(in.positions), [=](caf::expected<Tensor> out) mutable {
          if (out) rp.deliver(std::move(*out));
          else rp.deliver(out.error());
        });
        return rp;
      },
      [=](generate_request& req) -> caf::result<generate_result> {
        auto& st = self->state;
        if (st.busy) return make_error(errc::bad_request, "a generation is already running in this session");
        if (req.prompt.empty()) return make_error(errc::bad_request, "the prompt is empty");
        const int64_t need = st.length + static_cast<int64_t>(req.prompt.size()) + req.params.max_new_tokens;
        if (need > st.opt.max_length)
          return make_error(errc::max_length_exceeded,
                            "the session holds " + std::to_string(st.length) + " tokens; " +
                                std::to_string(req.prompt.size()) + " more and " +
                                std::to_string(req.params.max_new_tokens) + " new ones exceed its max_length " +
                                std::to_string(st.opt.max_length));
        auto g = std::make_shared<generation>();
        try {
          g->sampler = std::make_unique<Sampler>(req.params.sampling);
        } catch (const std::exception& e) {
          return make_error(errc::bad_request, e.what());
        }
        g->rp = self->make_response_promise<generate_result>();
        g->start = self->clock().now();
        std::vector<int32_t> prompt = req.prompt;
        g->req = std::move(req);
        st.busy = true;
        generate_step(self, g, std::move(prompt));
        return g->rp;
      },
      [=](route_atom) -> std::vector<std::string> {
        std::vector<std::string> out;
        for (auto& h : self->state.hops)
          out.push_back(h.plan.address + " [" + std::to_string(h.plan.first) + ", " + std::to_string(h.plan.last) +
                        ")");
        return out;
      },
      [=](close_atom) {
        close_all();
        self->quit();
      },
  };
}

}  // namespace

caf::actor spawn_inference_session(caf::actor_system& sys, std::shared_ptr<const ClientHead> head,
                                   caf::actor connector, session_options options, std::vector<planned_hop> route) {
  return sys.spawn(inference_session, std::move(head), std::move(connector), options, std::move(route));
}

}  // namespace corolla
