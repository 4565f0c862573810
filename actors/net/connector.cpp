#include "actors/net/connector.hpp"

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <map>
#include <set>
#include <vector>

#include "actors/net/peer_gateway.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct connector_state {
  std::map<std::string, caf::actor> local;   // registered in-process actors
  std::map<std::string, caf::actor> remote;  // resolved through the middleman
  std::map<caf::actor_addr, std::string> addresses;
  // Addresses whose registered in-process actor has stopped: this process's own ports, where dialling would reach
  // this node itself (whose peer gateway refuses a connection that claims its own id), so they fail at once.
  std::set<std::string> stopped;
  // Resolves waiting for a connection under way, by address: one connection serves them all.
  std::map<std::string, std::vector<caf::typed_response_promise<caf::actor>>> pending;
  static inline const char* name = "connector";
};

// The actor registered or connected under `address`, or null.
const caf::actor* known(const connector_state& st, const std::string& address) {
  for (const auto* table : {&st.local, &st.remote})
    if (auto it = table->find(address); it != table->end()) return &it->second;
  return nullptr;
}

caf::behavior connector(caf::stateful_actor<connector_state>* self) {
  self->set_down_handler([=](caf::down_msg& m) {
    auto it = self->state.addresses.find(m.source);
    if (it == self->state.addresses.end()) return;
    self->state.remote.erase(it->second);
    if (self->state.local.erase(it->second) > 0) self->state.stopped.insert(it->second);
    self->state.addresses.erase(it);
  });
  auto settle = [=](const std::string& address, const caf::actor& peer, const caf::error& e) {
    auto it = self->state.pending.find(address);
    if (it == self->state.pending.end()) return;
    auto waiting = std::move(it->second);
    self->state.pending.erase(it);
    for (auto& rp : waiting) {
      if (e)
        rp.deliver(e);
      else
        rp.deliver(peer);
    }
  };
  return {
      [=](connected_atom, const std::string& address, uint16_t port, int fd, const std::string& error) {
        if (fd < 0) {
          settle(address, {}, make_error(errc::peer_unavailable, "cannot connect to " + address + ": " + error));
          return;
        }
        auto& mm = self->home_system().middleman();
        auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
        auto scribe = mm.backend().new_scribe(fd);
        self->request(basp, std::chrono::seconds(10), caf::connect_atom::value, std::move(scribe), port)
            .then(
                [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
                  if (!ptr) {
                    settle(address, {}, make_error(errc::peer_unavailable, address + " publishes no actor"));
                    return;
                  }
                  auto a = caf::actor_cast<caf::actor>(ptr);
                  self->monitor(a);
                  self->state.addresses[a.address()] = address;
                  self->state.remote[address] = a;
                  settle(address, a, caf::error{});
                },
                [=](caf::error& e) {
                  // A peer whose gateway refuses what this node sent closes at once: with TLS on there, a node
                  // without it sees only this.
                  const std::string hint = e == caf::sec::disconnect_during_handshake
                                               ? " (the peer closed the connection at once: it may be a node with "
                                                 "TLS, of a private swarm, which needs this node to have its "
                                                 "certificate too; or it refused this node)"
                                               : "";
                  settle(
                      address, {},
                      make_error(errc::peer_unavailable, "cannot connect to " + address + ": " + describe(e) + hint));
                });
      },
      [=](register_atom, const std::string& address, caf::actor a) {
        self->monitor(a);
        self->state.addresses[a.address()] = address;
        self->state.local[address] = std::move(a);
        self->state.stopped.erase(address);
      },
      [=](relay_atom, const std::string& address, caf::message& payload) {
        auto rp = self->make_response_promise();
        if (const caf::actor* peer = known(self->state, address)) {
          rp.delegate(*peer, std::move(payload));
          return rp;
        }
        // Not known yet: resolved first, exactly as a resolve is.
        self->request(caf::actor_cast<caf::actor>(self), caf::infinite, resolve_atom::value, address)
            .then([=](caf::actor& peer) mutable { rp.delegate(peer, std::move(payload)); },
                  [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](resolve_atom, const std::string& address) -> caf::result<caf::actor> {
        if (const caf::actor* peer = known(self->state, address)) return *peer;
        if (self->state.stopped.count(address) > 0)
          return make_error(errc::peer_unavailable, "the actor at " + address + " in this process has stopped");
        std::string host;
        uint16_t port = 0;
        if (!parse_address(address, host, port))
          return make_error(errc::bad_request, "'" + address + "' is not a HOST:PORT address");
        auto rp = self->make_response_promise<caf::actor>();
        auto& waiting = self->state.pending[address];
        waiting.push_back(rp);
        if (waiting.size() > 1) return rp;
        // The peer gateway opens the connection (and filters what the peer sends); the BASP broker then
        // takes CAF's end of it and performs the handshake.
        auto me = caf::actor_cast<caf::actor>(self);
        try {
          PeerGateway::of(self->home_system())->connect(host, port, [me, address, port](int fd, std::string error) {
            caf::anon_send(me, connected_atom::value, address, port, fd, std::move(error));
          });
        } catch (const std::exception& e) {
          self->state.pending.erase(address);
          rp.deliver(make_error(errc::peer_unavailable, "cannot connect to " + address + ": " + e.what()));
        }
        return rp;
      },
  };
}

}  // namespace

bool parse_address(const std::string& address, std::string& host, uint16_t& port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned long p = 0;
  for (size_t i = colon + 1; i < address.size(); ++i) {
    if (address[i] < '0' || address[i] > '9') return false;
    p = p * 10 + static_cast<unsigned long>(address[i] - '0');
    if (p > 65535) return false;
  }
  if (p == 0) return false;
  port = static_cast<uint16_t>(p);
  return true;
}

caf::actor spawn_connector(caf::actor_system& sys) { return sys.spawn(connector); }

}  // namespace corolla
