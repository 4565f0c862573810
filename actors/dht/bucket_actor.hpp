// A k-bucket as an actor, owned (and linked) by its DHT node. It applies KBucket's rules to the contacts the
// node reports, pings the least recently seen contact when a newcomer finds the bucket full (evicting it only if
// the ping fails), and tells the node its members whenever they change (bucket_view). Refreshing an idle bucket
// is the node's (it meets every contact, the bucket hears only of the ones it reports).
//
//   node -> bucket: contact_seen, contact_failed, (address_atom, "HOST:PORT")   (dht_bucket_actor)
//   bucket -> node: bucket_view                                                (dht_node_parts)
#pragma once

#include <caf/actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/timespan.hpp>

#include "actors/dht/dht_internal.hpp"
#include "actors/dht/kbucket.hpp"

namespace corolla {

struct bucket_params {
  int index = 0;  // 159 (the far half of the id space) .. 0
  Contact self;   // the owning node (the sender of pings)
  KBucket::Options rules;
  caf::timespan rpc_timeout{};
};

// Spawned by the DHT node `owner` (linked to it), reporting to `node` (the same actor, typed).
dht_bucket_actor spawn_bucket(caf::local_actor* owner, dht_node_parts node, bucket_params params, caf::actor connector);

}  // namespace corolla
