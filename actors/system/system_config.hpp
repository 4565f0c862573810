// The composition root of every Corolla actor system: what it is made of (the middleman, the wire message types of
// every part, protocol and DHT, the error category, the peer gateway) and how it runs (failure detection that
// notices a frozen peer within about a second; a scheduler that follows the machine).
#pragma once

#include <caf/actor_system_config.hpp>
#include <memory>

#include "actors/net/peer_gateway.hpp"

namespace corolla {

// Peers' limits and TLS (peer_gateway_settings, actors/net/peer_gateway.hpp) are set on it before the system starts.
class corolla_config : public caf::actor_system_config, public peer_gateway_settings {
 public:
  corolla_config();
};

// The scheduler's threads: COROLLA_SCHEDULER_THREADS when set (1..1024; another value is reported on stderr and
// ignored), else the machine's hardware threads, at least 2.
size_t scheduler_threads();

// Registers Corolla's wire types and error category, and the peer gateway, on any actor_system_config (tests use
// their own configs). Every type registered under "corolla." is a wire message (actors/protocol/wire_message.hpp): the
// peer gateway passes exactly those.
void add_corolla_types(caf::actor_system_config& cfg);

}  // namespace corolla
