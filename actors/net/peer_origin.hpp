// Where the message being handled came from, as quotas per peer count it: "" from this node's own actors (no quota
// applies), the IP address the sender's node connected from (peer_gateway.hpp: a node id costs a peer nothing to
// change, its address does), the node's id when no gateway knows it (a system without one, or a connection closed
// meanwhile), and one shared origin for every anonymous message.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/node_id.hpp>
#include <string>

#include "actors/net/peer_gateway.hpp"

namespace corolla {

template <class Self>
std::string peer_origin(Self* self) {
  const auto& sender = self->current_sender();
  if (sender == nullptr) return "anonymous";
  if (sender->node() == self->node()) return {};
  if (auto address = peer_address_of(self->system(), sender->node())) return "address " + *address;
  return "node " + caf::to_string(sender->node());
}

}  // namespace corolla
