#include "sim/sim_connector.hpp"

#include <caf/all.hpp>
#include <functional>
#include <map>

#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "sim/sim_link.hpp"

namespace corolla::sim {
namespace {

using connect_done_atom = caf::atom_constant<caf::atom("simconnect")>;

struct sim_connector_state {
  Network* net = nullptr;
  node_index node = 0;
  std::map<std::string, caf::actor> links;  // live links by address
  std::map<caf::actor_addr, std::string> addresses;
  uint64_t next_wait = 1;
  std::map<uint64_t, std::function<void()>> waits;
  static inline const char* name = "sim_connector";
};

using connector_actor = caf::stateful_actor<sim_connector_state>;

caf::timespan seconds(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

void after(connector_actor* self, caf::timespan delay, std::function<void()> fn) {
  const uint64_t id = self->state.next_wait++;
  self->state.waits[id] = std::move(fn);
  self->delayed_send(self, delay, connect_done_atom::value, id);
}

caf::behavior sim_connector(connector_actor* self, Network* net, node_index node) {
  self->state.net = net;
  self->state.node = node;
  self->set_down_handler([=](caf::down_msg& m) {
    auto it = self->state.addresses.find(m.source);
    if (it == self->state.addresses.end()) return;
    auto link = self->state.links.find(it->second);
    if (link != self->state.links.end() && link->second.address() == m.source) self->state.links.erase(link);
    self->state.addresses.erase(it);
  });
  return {
      [=](register_atom, const std::string& address, caf::actor a) {
        self->state.net->publish(address, self->state.node, std::move(a));
      },
      [=](resolve_atom, const std::string& address) -> caf::result<caf::actor> {
        auto& st = self->state;
        if (auto it = st.links.find(address); it != st.links.end()) return it->second;
        const auto peer = st.net->lookup(address);
        if (!peer) return make_error(errc::peer_unavailable, "cannot connect to " + address + ": nobody listens there");
        if (peer->node == st.node) return peer->actor;
        const double rtt = 2 * st.net->latency_s(st.node, peer->node);
        auto rp = self->make_response_promise<caf::actor>();
        if (!st.net->reachable(st.node, peer->node)) {
          const bool refused = st.net->crashed(peer->node);
          const double wait = refused ? rtt : st.net->connection_timeout_s();
          after(self, seconds(wait), [=]() mutable {
            rp.deliver(make_error(errc::peer_unavailable, "cannot connect to " + address + ": " +
                                                              (refused ? "connection refused" : "no answer")));
          });
          return rp;
        }
        after(self, seconds(rtt), [=]() mutable {
          auto& st = self->state;
          if (auto it = st.links.find(address); it != st.links.end()) {
            rp.deliver(it->second);
            return;
          }
          auto now = st.net->lookup(address);
          if (!now || !st.net->reachable(st.node, now->node)) {
            rp.deliver(make_error(errc::peer_unavailable, "cannot connect to " + address + ": no answer"));
            return;
          }
          caf::actor link = spawn_link(self->home_system(), *st.net, st.node, now->node, now->actor);
          self->monitor(link);
          st.addresses[link.address()] = address;
          st.links[address] = link;
          rp.deliver(link);
        });
        return rp;
      },
      [=](connect_done_atom, uint64_t id) {
        auto it = self->state.waits.find(id);
        if (it == self->state.waits.end()) return;
        auto fn = std::move(it->second);
        self->state.waits.erase(it);
        fn();
      },
  };
}

}  // namespace

caf::actor spawn_sim_connector(caf::actor_system& sys, Network& net, node_index node) {
  return sys.spawn(sim_connector, &net, node);
}

}  // namespace corolla::sim
