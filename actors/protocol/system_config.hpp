// What every Corolla actor system needs: the middleman, the wire message types, the error category, and
// failure-detection settings (a frozen peer is noticed within about a second).
#pragma once

#include <caf/actor_system_config.hpp>
#include <memory>

#include "actors/net/peer_limits.hpp"

namespace corolla {

class PeerTls;

class corolla_config : public caf::actor_system_config {
 public:
  corolla_config();

  // What the peer gateway grants peers (peer_gateway.hpp); set before the actor system starts.
  peer_limits peers;
  // TLS on every peer link (peer_tls.hpp: PeerTls::make from the node's credentials); null: plain TCP.
  std::shared_ptr<PeerTls> tls;
};

// Registers Corolla's wire types and error category, and the peer gateway, on any actor_system_config (tests use
// their own configs). Every type registered under "corolla." is a wire message (wire_message.hpp): the peer
// gateway passes exactly those.
void add_corolla_types(caf::actor_system_config& cfg);

}  // namespace corolla
