// A DHT node's storage (actors/dht/storage.hpp) under any sequence of puts, reads and purges a stranger's stores
// can cause: keys, subkeys, value sizes, expirations and the clock from the input. Small limits, so that they are
// reached, and keys and the node fill up from several origins. Besides not crashing, the storage must keep its bounds
// (bytes, subkeys per key, and each origin's bytes), count its bytes exactly (each origin's add up to the node's),
// never hold an entry expiring more than max_ttl after it was stored, and return only live entries.
#include <chrono>
#include <cstdint>
#include <string>

#include "actors/dht/storage.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;
using namespace std::chrono_literals;

namespace {

using input = fuzz::input;

NodeId key_of(uint64_t k) {
  NodeId id{};
  id[0] = static_cast<uint8_t>(k);
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DhtStorage::Options o;
  o.max_subkeys = 8;
  o.max_bytes = 8 * DhtStorage::kEntryOverhead + 4096;
  o.max_ttl = 600s;
  o.max_subkeys_per_origin = 3;
  o.max_bytes_per_origin = 3 * DhtStorage::kEntryOverhead + 1500;
  // This node and four peers: together they can fill a key and the node, so both make room (storage.hpp).
  const std::string origins[] = {"", "address 10.0.0.1", "address 10.0.0.2", "address 10.0.0.3", "2001:db8:1:2::/64"};
  DhtStorage s(o);
  DhtTime now = DhtTime{} + 24h;
  input in{data, size};
  while (in.n > 0) {
    switch (in.take(1) % 4) {
      case 0:
      case 1: {
        const NodeId key = key_of(in.take(1) % 10);
        const std::string subkey(1 + in.take(1) % 12, static_cast<char>('a' + in.take(1) % 3));
        const std::string value(in.take(2) % 2048, 'v');
        // Anything from the past to far beyond the bound, as a store's ttl may say.
        const auto ttl = std::chrono::seconds(static_cast<int64_t>(in.take(2)) - 1000);
        const auto r = s.put(key, subkey, value, now + ttl, now, origins[in.take(1) % 5]);
        if (r == DhtStorage::Put::stored) require(ttl > 0s && ttl <= o.max_ttl);
        break;
      }
      case 2: {
        const NodeId key = key_of(in.take(1) % 10);
        const auto live = s.get(key, now);
        require(live.size() <= o.max_subkeys);
        for (const auto& [subkey, v] : live) require(v.expiration > now && v.expiration - now <= o.max_ttl);
        break;
      }
      default:
        now += std::chrono::seconds(in.take(1));
        s.purge(now);
        break;
    }
    require(s.bytes() <= o.max_bytes);
    require(s.keys() <= s.entries());
    size_t all = s.bytes_from(origins[0]);
    for (int i = 1; i < 5; ++i) {
      require(s.bytes_from(origins[i]) <= o.max_bytes_per_origin);
      all += s.bytes_from(origins[i]);
    }
    require(all == s.bytes());
  }
  return 0;
}
