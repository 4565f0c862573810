// The peer gateway: every connection between this node and a peer passes through it, so CAF's BASP broker never
// reads a byte a peer sent before basp_filter.hpp judged it.
//
// CAF's middleman would accept peers itself and allocate whatever a frame header announces. Instead the gateway
// (one Boost.Asio thread per actor system) owns the TCP sockets: each peer connection is joined to CAF by a
// socket pair, whose other end CAF gets as a scribe, exactly as if the peer had connected to it. Frames from the
// peer go through the filter (small ones whole, large ones judged on their beginning and then streamed); bytes
// from CAF go to the peer as they are. On top of the filter it enforces peer_limits: connections in total and
// per address, new connections per second per address, a handshake deadline, a minimum receive rate inside a
// frame, a write deadline, and a budget for the large frames CAF holds at once. With TLS on (peer_tls.hpp) it
// terminates TLS too: the filter and CAF see clear bytes, the network sees only TLS records.
//
//   publish_to_peers(sys, gate, "0.0.0.0", 31331)   instead of middleman().publish
//   PeerGateway::of(sys).connect(host, port, done)   used by the connector (connector.hpp) for every peer
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/net/peer_limits.hpp"

namespace corolla {

class PeerTls;

struct peer_gateway_stats {
  uint64_t accepted = 0;          // inbound connections taken
  uint64_t refused = 0;           // inbound connections closed at once by a limit
  uint64_t closed_by_filter = 0;  // connections closed for breaking the protocol or a deadline
  uint64_t dropped_frames = 0;    // well-formed frames not passed on
  uint64_t open = 0;              // connections open now
};

class PeerGateway {
 public:
  // The gateway of `sys` (started on first use); throws std::logic_error when the system's config has no
  // enable_peer_gateway or the system is shutting down. Callers keep it only for the call at hand.
  static std::shared_ptr<PeerGateway> of(caf::actor_system& sys);

  ~PeerGateway();

  // Listens on host:port (0: any free port) and hands each accepted peer to CAF as a connection to `whom`.
  caf::expected<uint16_t> publish(const caf::actor& whom, const std::string& host, uint16_t port);
  void unpublish(uint16_t port);

  // Connects to a peer. `done` runs on the gateway's thread with CAF's end of the connection (a socket to give
  // the BASP broker as a scribe), or with fd -1 and why not.
  void connect(const std::string& host, uint16_t port, std::function<void(int fd, std::string error)> done);

  peer_gateway_stats stats() const;
  // The IP address of the connection over which `node` reached this node (its handshake named it), while one is
  // open. A message from a peer names its node; this is where it came from, which the peer cannot choose: what
  // quotas per peer count by (a node id costs nothing to change).
  std::optional<std::string> address_of(const caf::node_id& node) const;

  struct impl;

 private:
  PeerGateway(caf::actor_system& sys, const peer_limits& limits, std::shared_ptr<PeerTls> tls);
  std::unique_ptr<impl> impl_;
  friend struct peer_gateway_registry;
};

// What a system's gateway grants peers and how it secures links: an actor_system_config that also derives from
// this (corolla_config, actors/system/system_config.hpp) gives its gateway these, set before the system starts;
// any other config gives the defaults (no TLS).
struct peer_gateway_settings {
  peer_limits peers;
  // TLS on every peer link (peer_tls.hpp: PeerTls::make from the node's credentials); null: plain TCP.
  std::shared_ptr<PeerTls> tls;
};

// Installs the thread hook that gives `cfg`'s actor systems a gateway (stopped with the system's multiplexer).
void enable_peer_gateway(caf::actor_system_config& cfg);

// The gateway's publish and unpublish, in the middleman's words.
caf::expected<uint16_t> publish_to_peers(caf::actor_system& sys, const caf::actor& whom, const std::string& host,
                                         uint16_t port);
void unpublish_from_peers(caf::actor_system& sys, uint16_t port);
// A publish_to_peers failure in words for a user ("cannot listen on HOST:PORT: WHY"), without CAF's wrapping.
std::string listen_error_text(const caf::error& e);

// PeerGateway::address_of on the gateway of `sys`, if it has one running (never starts one).
std::optional<std::string> peer_address_of(caf::actor_system& sys, const caf::node_id& node);

}  // namespace corolla
