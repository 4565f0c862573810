// A node's identity: its Ed25519 key, whose seed its store keeps (so a restarted node is the same node), and
// the DHT id derived from the public key (the SHA-1 of its 32 bytes): an id names a key, so a node can neither
// choose where it sits in the id space nor take another node's id without its secret.
#pragma once

#include "actors/dht/node_id.hpp"
#include "actors/store/node_store.hpp"
#include "actors/trust/ed25519.hpp"

namespace corolla {

inline SigningKey node_identity(NodeStore& store) { return SigningKey::from_seed(store.identity_seed()); }

inline NodeId dht_id_of(const PublicKey& key) {
  return sha1(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
}

}  // namespace corolla
