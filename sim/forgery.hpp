// Forged DHT records, as a hostile DHT peer makes them from servers' genuine ones (a world's [hostile] forge). Every
// honest node must refuse to store them and every reader must refuse to believe them (actors/dht/signed_record.hpp);
// the world checks the first (forged-refused) and dht-readable catches a reader that believed one (a forgery
// expires later than the record it copies, so a reader that took it would list the server with the forged span).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>
#include <caf/actor_system.hpp>

#include "actors/dht/dht_messages.hpp"
#include "actors/dht/node_id.hpp"
#include "actors/trust/ed25519.hpp"

namespace corolla::sim {

// The forgeries of `genuine`, a server's record stored under `key_id` that checks at now_unix_ms: its payload with
// the span widened to the whole model and its expiry ten minutes later under the owner's signature (tampered), and
// that payload signed by `forger` but put under the owner's subkey (a stolen subkey). Each asks to live ten minutes
// longer than `genuine`. Empty when `genuine` does not check (or is the forger's own).
std::vector<dht_item> forge_server_records(const SigningKey& forger, const NodeId& key_id, const dht_item& genuine,
                                           int64_t now_unix_ms);

// What a forging peer publishes as its DHT endpoint: pings, lookups and stores go to its real node; each find_value
// answer gains the forgeries of the records in it.
dht_rpc_actor spawn_forging_dht(caf::actor_system& sys, dht_rpc_actor real, std::shared_ptr<const SigningKey> forger);

}  // namespace corolla::sim
