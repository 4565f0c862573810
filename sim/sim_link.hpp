// A link: what a node's connector hands out for a peer in the simulator, in place of the middleman's proxy. It
// is an actor of its own kind (not scheduled: it handles each message as it is enqueued) that stands for the
// peer's actor as seen from one node:
//   - every message through it reaches the peer after the network's delay for its bytes, or never (lost, or the
//     nodes cannot reach each other: a request then times out at its requester);
//   - the sender the peer sees is a link the other way, to the original sender (on its own node: a sender that is
//     itself a link is unwrapped), so that whatever the peer sends back (replies, messages to current_sender(),
//     monitors) crosses the network too, and a reply from the end of a delegation chain goes straight to the
//     requester;
//   - a DHT RPC for a gate that has a DHT node goes to that node itself: the gate would only hand it on (in no
//     virtual time), and skipping that hop saves the gate one event per inbound RPC (8.6 M of a 10,000-server
//     hour's 125 M);
//   - when the peer's actor dies, the link goes down one latency later (a closed connection); when the nodes
//     stop hearing each other (a freeze, a partition), after the connection timeout (missed heartbeats). Down, it
//     sends down_msg to its monitors (as a middleman proxy does), and bounces what it gets afterwards.
// Everything runs on the simulation's one thread, on the actor clock.
#pragma once

#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "sim/network.hpp"

namespace corolla::sim {

// A link from node `from` to `target` on node `to` (`target_dht`: the DHT node behind it, or none). It registers
// itself with the network.
caf::actor spawn_link(caf::actor_system& sys, Network& net, node_index from, node_index to, caf::actor target,
                      dht_rpc_actor target_dht = {});

// The simulated node a message's sender stands for, as a DHT node's storage quotas count it (dht_options::origin):
// "" for an actor of the receiver's own node, the node's name behind a link.
std::string link_origin(const Network& net, const caf::strong_actor_ptr& sender);
// Brings a link down after `delay` (with `reason` for its monitors); nothing when it is down already.
void bring_link_down(caf::actor_system& sys, const caf::strong_actor_ptr& link, caf::timespan delay, caf::error reason);

}  // namespace corolla::sim
