// The server_node supervisor: the actor that owns a running server's parts — the span gate (which owns its block
// actors), the DHT node, the announcer and, for a server placed by the swarm's needs, the balancer and its block
// loader — linked so that none outlives a failure of another. It answers info through the gate, and (close_atom)
// stops the server gracefully: the balancer stops first (no move starts), the announcer stores "offline" in the
// DHT, then every part exits.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>
#include <optional>

#include "actors/balance/balancer.hpp"
#include "actors/server/announcer.hpp"
#include "actors/server/server_node.hpp"

namespace corolla {

struct server_parts {
  span_gate_node gate;
  dht_node_actor dht;
  announcer_handle announcer;
  balancer_handle balancer;  // optional
  caf::actor loader;         // optional
};

caf::actor spawn_node_supervisor(caf::actor_system& sys, server_parts parts);

// Everything of a server after its gate exists (and knows its address): the announcer and, with `balance` (for a
// gate spawned with an empty span), the block loader and the balancer, all under a supervisor. Without
// `balance` the caller loads the blocks itself (load_server_blocks). The same assembly runs in `corolla serve`
// and in the in-process swarms of tests and the simulator.
struct supervised_server {
  server_parts parts;
  caf::actor supervisor;
};
supervised_server start_server_parts(caf::actor_system& sys, const server_node& node, const server_setup& setup,
                                     std::shared_ptr<WeightSource> source, dht_node_actor dht, caf::actor connector,
                                     announcer_options announce, std::optional<balancer_options> balance);

}  // namespace corolla
