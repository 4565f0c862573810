// A lookup actor runs one iterative lookup (Lookup, lookup.hpp) for its DHT node, with up to alpha RPCs in
// flight: find_node for nodes, find_value for values (whose replies carry entries as well as contacts). It tells
// the node which contacts answered and which failed (contact_seen, contact_failed) so that the buckets learn,
// replies to lookup_atom with a lookup_result, and quits. A find_value lookup stops early once `replicas` nodes
// answered with entries; every lookup returns what it has after `deadline`.
#pragma once

#include <caf/actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/timespan.hpp>
#include <vector>

#include "actors/dht/lookup.hpp"

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
};

// Spawned by `node`, linked to it; request(lookup, t, lookup_atom::value) -> lookup_result.
caf::actor spawn_lookup(caf::event_based_actor* node, lookup_params params, caf::actor connector);

}  // namespace corolla
