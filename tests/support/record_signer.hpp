// Signed DHT records for tests that write as some owner (actors/dht/signed_record.hpp): one Ed25519 key per owner
// name, drawn at first use; records go under "<name>@<owner key>", and a reader's entries come back by name.
#pragma once

#include <map>
#include <string>

#include "actors/dht/dht_api.hpp"
#include "actors/dht/signed_record.hpp"
#include "actors/protocol/unix_clock.hpp"

namespace corolla::test {

class RecordSigner {
 public:
  const SigningKey& key(const std::string& owner) {
    auto it = keys_.find(owner);
    if (it == keys_.end()) it = keys_.emplace(owner, SigningKey::generate()).first;
    return it->second;
  }
  std::string subkey(const std::string& owner) { return owned_subkey(key(owner).public_key(), owner); }

  // `payload` under `key` as `owner`'s record, living until `expiration` (an actor-clock time).
  dht_put put(const std::string& key_name, const std::string& owner, const std::string& payload, DhtTime expiration) {
    const std::string sub = subkey(owner);
    return {key_name, sub, sign_record(key(owner), key_id(key_name), sub, payload, unix_ms_at(expiration)), expiration};
  }

  // The entries of `key` that check at `now`, by owner name, each with its payload.
  static DhtEntries payloads(const std::string& key_name, const DhtEntries& entries, DhtTime now) {
    DhtEntries out;
    for (const auto& [sub, v] : entries) {
      checked_record r = check_record(key_id(key_name), sub, v.value, unix_ms_at(now));
      if (r.problem.empty()) out[std::string(subkey_name(sub))] = DhtValue{std::string(r.payload), v.expiration};
    }
    return out;
  }

 private:
  std::map<std::string, SigningKey> keys_;
};

}  // namespace corolla::test
