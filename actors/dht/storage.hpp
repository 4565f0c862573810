// What a DHT node stores: per key id, a dictionary subkey -> (value, expiration). Each subkey expires on its own
// (one key such as "llama.12" holds one entry per server); reads return live entries only. Plain code: the time
// is passed in (the actor clock's now(), so virtual time works).
//
// A put replaces the entry stored for the same subkey unless that entry expires later (so an old republished copy
// never overwrites a fresh announcement). Entries already expired are refused, so are entries expiring more than
// `max_ttl` ahead, a new subkey once the key holds `max_subkeys`, a new key beyond `max_keys`, and anything that
// would take the bytes held past `max_bytes` (expired entries are dropped first to make room).
//
// Quotas per origin: what arrives from another node counts against its origin (the IP address it reached this node
// from; "" for this node's own puts, which no quota limits). One origin may hold at most `max_subkeys_per_origin`
// live subkeys of a key, entries in `max_keys_per_origin` keys and `max_bytes_per_origin` in all. Keys cost
// nothing, so without them one peer could fill the node's key table with small records, or sign
// records under as many keys as a DHT key holds subkeys and fill the keys of a swarm on the nodes nearest them:
// servers that join would be refused until the flood expired. An entry counts against the origin that last put it.
//
// A full key makes room for an origin that holds fewer of it: the origin holding the most of the key (this node's
// own entries excepted) gives up its entry that expires first, when it holds at least two more than the newcomer.
// Places move from the largest holders to smaller ones and never between equals, so a flood from a few addresses
// gives way to every server that comes, and flooders fill a key only with as many addresses as it has places.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "actors/dht/node_id.hpp"

namespace corolla {

// The actor clock's time (caf::actor_clock::time_point is this type).
using DhtTime = std::chrono::steady_clock::time_point;

// A value and its absolute expiration time (in this process's actor clock).
struct DhtValue {
  std::string value;
  DhtTime expiration{};
  bool operator==(const DhtValue&) const = default;
};

using DhtEntries = std::map<std::string, DhtValue>;  // subkey -> value

class DhtStorage {
 public:
  struct Options {
    size_t max_subkeys = 1024;                                     // per key
    size_t max_keys = 65536;                                       // keys held at once
    size_t max_bytes = size_t{256} << 20;                          // subkeys and values held at once
    std::chrono::nanoseconds max_ttl{int64_t{3600} * 1000000000};  // an entry expiring later is refused
    size_t max_subkeys_per_origin = 64;                            // per key, live entries from one origin
    size_t max_bytes_per_origin = size_t{16} << 20;                // subkeys and values from one origin
    size_t max_keys_per_origin = 1024;                             // keys holding entries from one origin
  };
  enum class Put { stored, superseded, expired, full, too_late, over_quota };

  DhtStorage() : DhtStorage(Options{}) {}
  explicit DhtStorage(Options o) : opt_(o) {}

  // `origin`: where the put came from ("" for this node itself).
  Put put(const NodeId& key, const std::string& subkey, std::string value, DhtTime expiration, DhtTime now,
          const std::string& origin = {});
  // What a put of `value` from `origin` would come to, judged before its signature is checked (a node verifies
  // only what it may keep): `held` when the same value is held live already (re-sent as it is: nothing to do),
  // `refused` when the origin's quotas refuse a new subkey or its bytes, or the key is full and no origin gives way
  // to it, else `check`.
  enum class Precheck { held, refused, check };
  Precheck precheck(const NodeId& key, const std::string& subkey, const std::string& value, const std::string& origin,
                    DhtTime now);
  // The live entries of `key` (empty when none).
  DhtEntries get(const NodeId& key, DhtTime now) const;
  // Calls fn(subkey, value) for each live entry of `key`, in subkey order, copying nothing (a find_value reply
  // copies them once, into itself).
  template <class Fn>
  void visit(const NodeId& key, DhtTime now, Fn&& fn) const {
    auto it = data_.find(key);
    if (it == data_.end()) return;
    for (const auto& [subkey, s] : it->second.entries)
      if (s.v.expiration > now) fn(subkey, s.v);
  }
  // Drops expired entries (and keys left empty); returns how many entries went.
  size_t purge(DhtTime now);

  size_t keys() const { return data_.size(); }
  size_t bytes() const { return bytes_; }
  size_t entries() const;
  size_t bytes_from(const std::string& origin) const;
  size_t keys_from(const std::string& origin) const;  // keys holding its entries (live or not yet purged)
  // Every live entry with the time it was last stored here (for republishing).
  void for_each(DhtTime now, const std::function<void(const NodeId& key, const std::string& subkey, const DhtValue& v,
                                                      DhtTime stored_at)>& fn) const;

 private:
  struct Stored {
    DhtValue v;
    DhtTime stored_at{};
    std::string origin;
  };
  struct KeyData {
    std::map<std::string, Stored> entries;
    std::map<std::string, size_t> origins;  // entries held from each origin but this node (live or not yet purged)
    DhtTime soonest = DhtTime::max();       // no entry expires before this (a full key is checked at every put)
  };
  // Drops the entries of `k` expired at `now`; returns how many.
  size_t drop_expired(KeyData& k, DhtTime now);
  static size_t held_by(const KeyData& k, const std::string& origin);  // entries of `k` from `origin` ("": none)
  // Drops the expired entries of `k` when `origin` holds its quota of it (expired entries do not count).
  void drop_expired_at_quota(KeyData& k, const std::string& origin, DhtTime now);
  // Whether the origin's quotas refuse `size` bytes under `subkey` of `k` (null: a new key), whose entry there now is
  // `held` (null: a new subkey).
  bool quota_refuses(const KeyData* k, const std::string& subkey, const Stored* held, size_t size,
                     const std::string& origin) const;
  void count(KeyData& k, const std::string& subkey, const Stored& s, bool add);  // all the tallies
  // Where a new subkey from `origin` goes in `k`: a free place (end()), the entry that gives way to it, or none.
  std::optional<std::map<std::string, Stored>::iterator> place_for(KeyData& k, const std::string& origin, DhtTime now);
  // The entry of a full `k` that gives way to a new subkey from `origin`, if one does (see the header).
  std::map<std::string, Stored>::iterator room_for(KeyData& k, const std::string& origin);
  Options opt_;
  std::map<NodeId, KeyData, id_less> data_;
  size_t bytes_ = 0;                            // subkeys and values held
  std::map<std::string, size_t> origin_bytes_;  // of them, from each origin but this node
  std::map<std::string, size_t> origin_keys_;   // keys holding entries from each origin but this node
};

}  // namespace corolla
