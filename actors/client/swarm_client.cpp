// The swarm client: knows the servers (for now by asking the initial peers for their info), plans routes and
// opens inference sessions over them.
#include <caf/all.hpp>
#include <map>

#include "actors/client/client_api.hpp"
#include "actors/client/inference_session.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/net/pings.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct client_state {
  swarm_client_options opt;
  std::shared_ptr<const ClientHead> head;
  caf::actor connector;
  caf::actor dht;           // client-mode DHT node, when joining through the DHT
  bool bootstrapped = false;
  std::vector<server_info> servers;
  std::shared_ptr<rtt_table> rtts = std::make_shared<rtt_table>();  // smoothed round trips to servers (routing)
  static inline const char* name = "swarm_client";
};

using client_actor = caf::stateful_actor<client_state>;

// Asks every initial peer for its info; peers that do not answer are left out.
void poll_peers(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  auto infos = std::make_shared<std::vector<server_info>>();
  auto pending = std::make_shared<size_t>(st.opt.initial_peers.size());
  if (*pending == 0) return done({});
  auto one_done = [=] {
    if (--*pending == 0) done(*infos);
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

// Reads every block's key from the DHT; a server listed under several blocks counts once, offline ones not at
// all.
void read_dht(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  const int64_t blocks = st.head->config().num_layers;
  auto found = std::make_shared<std::map<std::string, server_info>>();
  auto pending = std::make_shared<int64_t>(blocks);
  auto one_done = [=] {
    if (--*pending > 0) return;
    std::vector<server_info> infos;
    for (auto& [address, info] : *found) infos.push_back(info);
    done(std::move(infos));
  };
  for (int64_t b = 0; b < blocks; ++b)
    self->request(st.dht, st.opt.request_timeout, dht_get{block_key(st.opt.model_prefix, b)})
        .then(
            [=](dht_get_reply& r) {
              for (auto& s : parse_servers(r.entries))
                if (s.info.state == "online") (*found)[s.info.address] = std::move(s.info);
              one_done();
            },
            [=](caf::error&) { one_done(); });
}

// The servers of the swarm, from the DHT (bootstrapping the client's node the first time) or the initial peers.
void refresh(client_actor* self, std::function<void(std::vector<server_info>)> done) {
  auto& st = self->state;
  auto keep = [=](std::vector<server_info> infos) {
    self->state.servers = infos;
    done(std::move(infos));
  };
  if (!st.dht) return poll_peers(self, keep);
  if (st.bootstrapped) return read_dht(self, keep);
  self->request(st.dht, st.opt.request_timeout, dht_bootstrap{st.opt.initial_peers})
      .then(
          [=](const dht_bootstrap_reply&) {
            self->state.bootstrapped = true;
            read_dht(self, keep);
          },
          [=](caf::error&) { keep({}); });
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
  if (!st.opt.model_prefix.empty()) {
    dht_options dopt;
    dopt.id = st.opt.dht_id;
    dopt.client_mode = true;
    dopt.rpc_timeout = std::chrono::seconds(5);
    st.dht = spawn_dht_node(self->home_system(), dopt, st.connector);
    self->link_to(st.dht);
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
            rp.deliver(make_error(errc::no_route, st.dht ? "no server of swarm '" + st.opt.model_prefix +
                                                               "' is announced in the DHT (initial peers: " +
                                                               std::to_string(st.opt.initial_peers.size()) + ")"
                                                         : std::string("none of the initial peers answered")));
            return;
          }
          // Measure (and smooth) the round trips to the servers, then take the chain of least expected latency.
          std::vector<std::string> addresses;
          for (const auto& s : infos) addresses.push_back(s.address);
          const auto ping_timeout = std::min<caf::timespan>(st.opt.request_timeout, std::chrono::seconds(2));
          ping_peers(self, st.connector, addresses, st.rtts, ping_timeout, [=]() mutable {
            auto& st = self->state;
            const int64_t blocks = st.head->config().num_layers;
            route_plan plan = plan_route(infos, 0, blocks, {}, req.max_length * req.batch, {}, st.rtts->ms);
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
