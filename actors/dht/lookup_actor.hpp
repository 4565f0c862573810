// A lookup actor runs one iterative lookup (Lookup, lookup.hpp) for its DHT node, with up to alpha RPCs in
// flight: find_node for nodes, find_value for values (whose replies carry entries as well as contacts). It tells
// the node which contacts answered and which failed (contact_seen, contact_failed) so that the buckets learn,
// replies to lookup_atom with a lookup_result, and quits. A find_value lookup stops early once `replicas` nodes
// answered with entries; every lookup returns what it has after `deadline`.
#pragma once

#include <caf/actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/timespan.hpp>
#include <vector>

#include "actors/dht/dht_internal.hpp"
#include "actors/dht/lookup.hpp"
#include "actors/protocol/unix_clock.hpp"

namespace corolla {

struct lookup_params {
  NodeId target{};
  bool find_value = false;
  Contact self;  // the sender named in requests (empty address: client mode)
  Lookup::Options rules;
  size_t replicas = 5;
  caf::timespan rpc_timeout{};
  caf::timespan deadline{};
  std::vector<Contact> initial;
  wall_clock wall;  // the node's, for records' signed expiries
};

// Spawned by the DHT node `owner` (linked to it), reporting to `node` (the same actor, typed);
// request(lookup, t, lookup_atom::value) -> lookup_result.
dht_lookup_actor spawn_lookup(caf::local_actor* owner, dht_node_parts node, lookup_params params, caf::actor connector);

}  // namespace corolla
