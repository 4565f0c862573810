// Messages between a DHT node and the actors it owns (bucket actors, lookup actors); in-process only.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/typed_actor.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actors/dht/dht_messages.hpp"
#include "actors/dht/kbucket.hpp"
#include "actors/dht/storage.hpp"
#include "actors/protocol/atoms.hpp"

namespace corolla {

using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using republish_atom = caf::atom_constant<caf::atom("republish")>;
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;

// A contact answered (or sent us a request): node -> bucket.
struct contact_seen {
  Contact contact;
};
// An RPC to `id` failed; `stale`: it was the liveness ping made for a waiting replacement.
struct contact_failed {
  NodeId id{};
  bool stale = false;
};
// Bucket -> node: the bucket's members changed (the node routes with these views).
struct bucket_view {
  int index = 0;
  std::vector<Contact> contacts;
};
// Lookup actor -> node, the reply to lookup_atom.
struct lookup_result {
  std::vector<Contact> closest;   // the closest contacts that answered, closest first (at most k)
  std::vector<Contact> answered;  // every contact that answered (the node's buckets learn of them at the end)
  DhtEntries entries;             // find_value: the merged live entries
  size_t holders = 0;             // find_value: nodes that answered with entries
  int hops = 0;
  size_t queries = 0;
};

// A bucket actor (bucket_actor.hpp), as its node sees it.
using dht_bucket_actor = caf::typed_actor<caf::reacts_to<contact_seen>, caf::reacts_to<contact_failed>,
                                          caf::reacts_to<address_atom, std::string>>;

// A lookup actor (lookup_actor.hpp): asked once for its result; deadline_atom is its own timer.
using slow_tick_atom = caf::atom_constant<caf::atom("slowtick")>;
using dht_lookup_actor = caf::typed_actor<caf::replies_to<lookup_atom>::with<lookup_result>,
                                          caf::reacts_to<deadline_atom>, caf::reacts_to<slow_tick_atom>>;

// The DHT node as its buckets and lookups see it: they report contacts met and lost, and buckets their members.
using dht_node_parts =
    caf::typed_actor<caf::reacts_to<contact_seen>, caf::reacts_to<contact_failed>, caf::reacts_to<bucket_view>>;

inline dht_contact to_wire(const Contact& c) { return {id_bytes(c.id), c.address}; }

// nullopt when the id is not 20 bytes.
inline std::optional<Contact> from_wire(const dht_contact& c) {
  auto id = id_from_bytes(c.id);
  if (!id) return std::nullopt;
  return Contact{*id, c.address};
}

}  // namespace corolla

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::contact_seen)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::contact_failed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::bucket_view)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::lookup_result)
