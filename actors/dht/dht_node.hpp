// The DHT node actor: a Kademlia node (as hivemind's DHT under Petals), the swarm's only registry.
//   - owns one bucket actor per non-empty k-bucket (bucket_actor.hpp) and routes with the members they report;
//   - answers the RPCs of other nodes (dht_messages.hpp: ping, find_node, find_value, store), unless it runs in
//     client mode, where it refuses them and is never added to other nodes' tables;
//   - runs lookups (one lookup actor each, alpha = 3 queries in flight) for the actor API in dht_api.hpp:
//     put (store on the 5 nearest nodes), get (merged live subkeys), bootstrap, find_nodes, info;
//   - purges expired entries, and republishes entries nobody stored here again within a republish period.
// Peers are addresses, resolved through the connector for every RPC; time is the actor clock's; randomness comes
// from RNGs seeded with the node id.
#pragma once

#include <functional>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <string>

#include "actors/protocol/unix_clock.hpp"
#include "actors/dht/dht_api.hpp"

namespace corolla {

struct dht_options {
  NodeId id{};                // the node's id: NodeStore::node_key() for a persistent node
  std::string address;        // where other nodes reach this one (HOST:PORT, or a name registered with the connector)
  bool client_mode = false;   // send requests only: never added to routing tables, refuses incoming RPCs
  size_t k = 20;              // bucket size, and the number of contacts a lookup converges on
  size_t alpha = 3;           // queries in flight per lookup
  size_t replicas = 5;        // nodes each value is stored on
  size_t max_failures = 3;    // failed RPCs in a row before a contact leaves its bucket
  size_t max_subkeys = 1024;  // per key, on each node
  caf::timespan rpc_timeout = std::chrono::seconds(5);
  caf::timespan lookup_timeout = std::chrono::seconds(30);  // a lookup returns what it has by then
  // A bucket idle this long looks up a random id in it (Kademlia's tRefresh: lookups and the traffic a node
  // answers keep most buckets met far more often).
  caf::timespan refresh_period = std::chrono::hours(1);
  caf::timespan republish_period = std::chrono::minutes(10);  // entries not stored here again within it are
                                                              // sent again to the key's nearest nodes
  caf::timespan purge_period = std::chrono::seconds(60);      // expired entries are dropped this often
  wall_clock wall;  // what records' signed expiries are read against (the process's; a simulated node's own)
  // Where a store's sender comes from, for the storage's quotas per origin ("" for this node itself). Unset: the
  // address its node connected from (actors/net/peer_origin.hpp); the simulator gives its nodes' addresses.
  std::function<std::string(const caf::strong_actor_ptr& sender)> origin;
};

// Spawns a DHT node (server mode needs a non-empty address, possibly set later with address_atom).
dht_node_actor spawn_dht_node(caf::actor_system& sys, dht_options options, caf::actor connector);

}  // namespace corolla
