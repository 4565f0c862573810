// Control messages between a node's own actors (a new span, the node's address, timers) are obeyed only when
// they come from an actor of this node. Published actors are reachable from the network, and what a peer may send
// them is the peer protocol alone: the peer gateway drops everything else before CAF delivers it
// (actors/net/basp_filter.hpp); this is the actor's own check, which holds without it. A message without a
// sender is not from this node: a peer can send anonymously.
#pragma once

namespace corolla {

template <class Self>
bool from_own_node(Self* self) {
  const auto& sender = self->current_sender();
  return sender != nullptr && sender->node() == self->node();
}

}  // namespace corolla
