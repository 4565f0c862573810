// Signed DHT records: every value a DHT node stores and a reader believes is a SignedRecord (schema/dht.capnp)
// whose owner signed the key's id, the subkey, the payload and an expiry in Unix time. Plain C++.
//
// Ownership is in the subkey: "<owner hex>" or "<name>@<owner hex>" (64 lower-case hex digits of the owner's
// Ed25519 public key). A record is valid only when its owner is the one its subkey names and its signature
// verifies, so nobody can write under another node's subkey; its expiry bounds how long it is believed, so a
// replayed copy dies when the original would. DHT nodes check on every store (and shorten the entry's life to the
// signed expiry), readers check again: a node that skips the check cannot make a reader believe a forgery.
//
//   std::string value = sign_record(key, key_id(k), owned_subkey(key.public_key()), payload, expires_unix_ms);
//   checked_record r = check_record(key_id(k), subkey, value, now_unix_ms);
//   if (!r.problem.empty()) ... refuse ...; else use r.payload
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "actors/dht/node_id.hpp"
#include "actors/dht/storage.hpp"
#include "actors/protocol/unix_clock.hpp"
#include "actors/trust/ed25519.hpp"

namespace corolla {

// How many records whose signatures checked a process remembers (emptied when full), so that it checks each once:
// the simulator's nodes remember as many (sim/network.hpp).
inline constexpr size_t kCheckedRecordsKept = 16384;

// How far ahead of a checker's clock a signed expiry may lie: the DHT's longest life (an hour) and a minute of
// clock difference between the signer and the checker.
inline constexpr int64_t kMaxRecordAheadMs = int64_t{3600 + 60} * 1000;

// "<owner hex>", or "<name>@<owner hex>" when one owner keeps several subkeys under one key.
std::string owned_subkey(const PublicKey& owner, std::string_view name = {});
// The owner a subkey names, or nullopt when it names none.
std::optional<PublicKey> subkey_owner(std::string_view subkey);
// The part before "@<owner hex>" (empty for a bare owner).
std::string_view subkey_name(std::string_view subkey);

// The value to store: `payload` signed by `key` for `key_id` and `subkey` (which must name `key`'s public key;
// std::invalid_argument otherwise), believed until `expires_unix_ms`.
std::string sign_record(const SigningKey& key, const NodeId& key_id, std::string_view subkey, std::string_view payload,
                        int64_t expires_unix_ms);

struct checked_record {
  std::string problem;       // empty when the record is valid
  std::string_view payload;  // inside the `value` given to check_record (empty when not valid)
  int64_t expires_unix_ms = 0;
  PublicKey owner{};
};
// Checks `value` as the record stored under `key_id` / `subkey` at Unix time `now_unix_ms`: a SignedRecord,
// signed by the owner the subkey names over this key id and subkey, not expired, expiring at most
// kMaxRecordAheadMs ahead. The payload is a view into `value`: keep `value` while you use it. Never throws.
checked_record check_record(const NodeId& key_id, std::string_view subkey, std::string_view value, int64_t now_unix_ms);
// The same without the clock (expiry not judged): for a reader of entries its DHT node has already given their
// lives, in that node's clock (record_expiration).
checked_record check_record_signature(const NodeId& key_id, std::string_view subkey, std::string_view value);

// What a DHT node does with a record arriving at actor-clock time `now` that asks to live until `requested`: the
// expiration it may hold (`requested`, cut to the signed expiry as the node's wall clock reads it), or nullopt when
// the record does not check (the reason in `problem`, when given).
std::optional<DhtTime> record_expiration(const NodeId& key_id, std::string_view subkey, std::string_view value,
                                         DhtTime requested, DhtTime now, std::string* problem = nullptr,
                                         const wall_clock& wall = {});

}  // namespace corolla
