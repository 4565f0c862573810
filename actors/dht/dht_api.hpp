// The DHT node's actor API (spawn_dht_node is in dht_node.hpp), for code in the same process: a server's
// announcer, a client's swarm view, tools.
//
//   request(node, t, dht_put{key, subkey, value, expiration})  -> dht_put_reply{replicas}   (or an error)
//   request(node, t, dht_get{key})                             -> dht_get_reply{entries, ...}
//   request(node, t, dht_bootstrap{{"host:port", ...}})        -> dht_bootstrap_reply{answered, contacts}
//   request(node, t, dht_find_nodes{key})                      -> dht_find_nodes_reply{closest, hops, queries}
//   request(node, t, dht_info_request{})                       -> dht_info
//   send(node, address_atom::value, "HOST:PORT")               (where the node was published)
//
// `dht_node_actor` is that interface as a type (with the RPCs other nodes send it, dht_rpc_actor): every holder of
// a DHT node holds it typed, and a server's gate, which only relays RPCs, holds just dht_rpc_actor.
//
// Expirations are absolute times of this process's actor clock (self->clock().now() + ttl). These types never
// cross processes; nodes talk to each other with the wire messages of dht_messages.hpp. docs/dht.md has the
// details.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/dht/dht_messages.hpp"
#include "actors/dht/kbucket.hpp"
#include "actors/dht/node_id.hpp"
#include "actors/dht/storage.hpp"
#include "actors/protocol/atoms.hpp"

namespace corolla {

// Stores `value` under `subkey` of `key` on the `replicas` nodes nearest to SHA-1(key) (this node included when
// it is one of them and not a client). The value is a record signed by the owner the subkey names
// (signed_record.hpp: sign_record); every node keeps it no longer than its signed expiry. Errors: bad_request
// (value over 64 KiB, subkey over 1 KiB, expiration not in the future, a record that does not check),
// peer_unavailable (no node stored it).
struct dht_put {
  std::string key, subkey, value;
  DhtTime expiration{};
};
struct dht_put_reply {
  size_t replicas = 0;  // nodes that stored the entry
};

// The live subkeys of `key`, merged over the nodes that hold it (for each subkey, the latest expiration among the
// records that check: a holder's forgery never displaces the owner's record). No entry
// is not an error: the map is empty.
struct dht_get {
  std::string key;
};
struct dht_get_reply {
  DhtEntries entries;  // subkey -> (value, expiration)
  int hops = 0;        // the lookup's longest chain of queries
  size_t queries = 0;  // RPCs the lookup sent
  size_t holders = 0;  // nodes that answered with entries
};

// Pings the initial peers, then looks up the node's own id and refreshes the buckets beyond its closest neighbour.
// Error: peer_unavailable "none of the initial peers answered: a:1, b:2".
struct dht_bootstrap {
  std::vector<std::string> peers;
};
struct dht_bootstrap_reply {
  std::vector<std::string> answered;
  size_t contacts = 0;  // contacts known once bootstrapping is done
};

// The k nodes nearest to SHA-1(key) (or to `target` when key is empty), found by an iterative lookup.
struct dht_find_nodes {
  std::string key;
  NodeId target{};
};
struct dht_find_nodes_reply {
  std::vector<Contact> closest;
  int hops = 0;
  size_t queries = 0;
};

struct dht_info_request {};
struct dht_info {
  NodeId id{};
  std::string address;
  bool client_mode = false;
  size_t contacts = 0, buckets = 0;  // routing table
  std::vector<Contact> table;        // its members, as the buckets last reported them
  size_t keys = 0, entries = 0;      // local storage (live or not yet purged)
};

// The node's own process talks to it through this; other nodes' RPCs arrive as dht_rpc_actor's messages.
using dht_node_actor =
    dht_rpc_actor::extend<caf::replies_to<dht_put>::with<dht_put_reply>, caf::replies_to<dht_get>::with<dht_get_reply>,
                          caf::replies_to<dht_bootstrap>::with<dht_bootstrap_reply>,
                          caf::replies_to<dht_find_nodes>::with<dht_find_nodes_reply>,
                          caf::replies_to<dht_info_request>::with<dht_info>, caf::reacts_to<address_atom, std::string>>;

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_put)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_put_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_get)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_get_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_bootstrap)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_bootstrap_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_find_nodes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_find_nodes_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_info_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::dht_info)
