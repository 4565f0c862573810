// The swarm client: knows the servers (for now by asking the initial peers for their info), plans routes and
// opens inference sessions over them.
#include <caf/all.hpp>

#include "actors/client/client_api.hpp"
#include "actors/client/inference_session.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct client_state {
  swarm_client_options opt;
  std::shared_ptr<const ClientHead> head;
  caf::actor connector;
  std::vector<server_info> servers;
  static inline const char* name = "swarm_client";
};

using client_actor = caf::stateful_actor<client_state>;

// Asks every initial peer for its info; peers that do not answer are left out.
void refresh(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  auto infos = std::make_shared<std::vector<server_info>>();
  auto pending = std::make_shared<size_t>(st.opt.initial_peers.size());
  if (*pending == 0) return done({});
  auto one_done = [=] {
    if (--*pending == 0) {
      self->state.servers = *infos;
      done(*infos);
    }
  };
  for (const auto& peer : st.opt.initial_peers)
    self->request(st.connector, st.opt.request_timeout, resolve_atom::value, peer)
        .then(
            [=](caf::actor gate) {
              self->request(gate, self->state.opt.request_timeout, info_request{})
                  .then(
                      [=](server_info& info) {
                        if (info.wire_error.empty()) {
                          if (info.address.empty()) info.address = peer;
                          infos->push_back(std::move(info));
                        }
                        one_done();
                      },
                      [=](caf::error&) { one_done(); });
            },
            [=](caf::error&) { one_done(); });
}

caf::behavior swarm_client(client_actor* self, swarm_client_options opt, std::shared_ptr<const ClientHead> head,
                           caf::actor connector) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.head = std::move(head);
  if (connector) {
    st.connector = connector;
  } else {  // our own: it ends with us (pending connects would otherwise keep it alive until they time out)
    st.connector = spawn_connector(self->home_system());
    self->link_to(st.connector);
  }
  return {
      [=](refresh_atom) -> caf::result<std::vector<server_info>> {
        auto rp = self->make_response_promise<std::vector<server_info>>();
        refresh(self, [=](std::vector<server_info> infos) mutable { rp.deliver(std::move(infos)); });
        return rp;
      },
      [=](const open_session_request& req) -> caf::result<caf::actor> {
        auto rp = self->make_response_promise<caf::actor>();
        refresh(self, [=](std::vector<server_info> infos) mutable {
          auto& st = self->state;
          if (infos.empty()) {
            rp.deliver(make_error(errc::no_route, "none of the initial peers answered"));
            return;
          }
          const int64_t blocks = st.head->config().num_layers;
          route_plan plan = plan_route(infos, 0, blocks, {}, req.max_length * req.batch);
          if (!plan.ok()) {
            rp.deliver(make_error(errc::no_route, plan.error));
            return;
          }
          session_options so{st.opt.mode, st.opt.request_timeout, req.max_length, req.batch};
          auto session = spawn_inference_session(self->home_system(), st.head, st.connector, so, plan.hops);
          self->request(session, st.opt.request_timeout * 4, open_atom::value)
              .then([=](const ack&) mutable { rp.deliver(session); },
                    [=](caf::error& e) mutable {
                      self->send_exit(session, caf::exit_reason::user_shutdown);
                      rp.deliver(std::move(e));
                    });
        });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_swarm_client(caf::actor_system& sys, swarm_client_options options,
                              std::shared_ptr<const ClientHead> head, caf::actor connector) {
  return sys.spawn(swarm_client, std::move(options), std::move(head), std::move(connector));
}

}  // namespace corolla
