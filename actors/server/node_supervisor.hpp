// The server_node supervisor: the actor that owns a running server's parts — the span gate (which owns its block
// actors), the DHT node and the announcer — linked so that none outlives a failure of another. It answers info
// through the gate, and (close_atom) stops the server gracefully: the announcer stores "offline" in the DHT
// first, then every part exits. The balancer (moving spans) joins it later.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

namespace corolla {

struct server_parts {
  caf::actor gate, dht, announcer;
};

caf::actor spawn_node_supervisor(caf::actor_system& sys, server_parts parts);

}  // namespace corolla
