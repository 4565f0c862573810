// A node's connector in the simulator: the same protocol as actors/net/connector.hpp (register_atom, resolve_atom),
// so the real actors that ask it for peers run unchanged. It resolves an address published in the network to a
// link (sim/sim_link.hpp) from this node to it, made on first use after one round trip (the connection's
// handshake) and kept until it goes down; the node's own actors resolve to themselves. A peer that cannot be
// reached answers peer_unavailable: at once when nothing is published there, after one round trip when its node
// crashed (connection refused), after the connection timeout when it is frozen or cut off.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "sim/network.hpp"

namespace corolla::sim {

caf::actor spawn_sim_connector(caf::actor_system& sys, Network& net, node_index node);

}  // namespace corolla::sim
