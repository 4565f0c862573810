// What a DHT node stores: per key id, a dictionary subkey -> (value, expiration). Each subkey expires on its own
// (one key such as "llama.12" holds one entry per server); reads return live entries only. Plain code: the time
// is passed in (the actor clock's now(), so virtual time works).
//
// A put replaces the entry stored for the same subkey unless that entry expires later (so an old republished copy
// never overwrites a fresh announcement). Entries already expired are refused, so are entries expiring more than
// `max_ttl` ahead, a new subkey once the key holds `max_subkeys`, and anything that would take what the node holds
// past `max_bytes`. An entry costs its subkey and value and `kEntryOverhead` besides (what it takes in memory
// beyond them), so the byte budgets bound the number of entries and keys too. Expired entries leave at the next
// put, precheck or purge, soonest first, through an index by expiration (no walk of the whole store).
//
// Quotas per origin: what arrives from another node counts against its origin (the IP address it reached this node
// from; "" for this node's own puts, which no quota limits). One origin may hold at most `max_subkeys_per_origin`
// live subkeys of a key and `max_bytes_per_origin` in all. Keys cost nothing, so without them one peer could sign
// records under as many keys as a DHT key holds subkeys and fill the keys of a swarm on the nodes nearest them:
// servers that join would be refused until the flood expired. An entry counts against the origin that last put it.
//
// Where a node is full, the largest holder makes room for a smaller one, so a flood from a few addresses gives way
// to every server that comes:
// - A full key: the origin holding the most of the key (this node's own entries excepted) gives up its entry that
//   expires first, when it holds at least two more than the newcomer. Places move from the largest holders to
//   smaller ones and never between equals, so flooders fill a key only with as many addresses as it has places.
// - A full node (`max_bytes`): the origin holding the most bytes of the node (this node excepted) gives up its
//   entries that expire first, as many as the newcomer needs, while it keeps at least what the newcomer will hold.
//   Flooders fill a node only with as many addresses as it holds entries of their size.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
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
    size_t max_bytes = size_t{256} << 20;                          // what the entries held at once cost
    std::chrono::nanoseconds max_ttl{int64_t{3600} * 1000000000};  // an entry expiring later is refused
    size_t max_subkeys_per_origin = 64;                            // per key, live entries from one origin
    size_t max_bytes_per_origin = size_t{16} << 20;                // what the entries from one origin cost
  };
  // What an entry takes in memory besides its subkey and value: its nodes in its key's map and in the two indexes
  // by expiration, its origin, and a key of its own. Measured with glibc's malloc (100,000 entries, IPv6 origins):
  // 650 bytes in a key each, 370 in keys of 1,000 entries.
  static constexpr size_t kEntryOverhead = 640;
  // What an entry costs in the byte budgets.
  static size_t entry_cost(const std::string& subkey, size_t value_bytes) {
    return kEntryOverhead + subkey.size() + value_bytes;
  }
  enum class Put { stored, superseded, expired, full, too_late, over_quota };

  DhtStorage() : DhtStorage(Options{}) {}
  explicit DhtStorage(Options o) : opt_(o) {}

  // `origin`: where the put came from ("" for this node itself).
  Put put(const NodeId& key, const std::string& subkey, std::string value, DhtTime expiration, DhtTime now,
          const std::string& origin = {});
  // What a put of `value` from `origin` would come to, judged before its signature is checked (a node verifies
  // only what it may keep): `held` when the same value is held live already (re-sent as it is: nothing to do),
  // `refused` when the origin's quotas refuse it, or the key or the node is full and no origin gives way to it,
  // else `check`.
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
  // Drops the entries expired at `now` (and keys left empty); returns how many went.
  size_t purge(DhtTime now);

  size_t keys() const { return data_.size(); }
  size_t bytes() const { return bytes_; }  // what the entries held cost (entry_cost)
  size_t entries() const { return expiring_.size(); }
  size_t bytes_from(const std::string& origin) const;  // what its entries cost ("": this node's own)
  // Every live entry with the time it was last stored here (for republishing).
  void for_each(DhtTime now, const std::function<void(const NodeId& key, const std::string& subkey, const DhtValue& v,
                                                      DhtTime stored_at)>& fn) const;

 private:
  struct Stored {
    DhtValue v;
    DhtTime stored_at{};
    std::string origin;
  };
  using Entries = std::map<std::string, Stored>;
  struct KeyData {
    Entries entries;
    std::map<std::string, size_t> origins;  // entries held from each origin but this node
  };
  using Keys = std::map<NodeId, KeyData, id_less>;
  // An entry in the indexes by expiration: it points at the key and subkey of its map nodes (which stay put), and
  // orders by expiration, then key and subkey (values, not addresses: the order is the same in every run).
  struct Ref {
    DhtTime expiration;
    const NodeId* key;
    const std::string* subkey;
    size_t cost;  // not compared
  };
  struct RefOrder {
    bool operator()(const Ref& a, const Ref& b) const;
  };
  using Expiring = std::set<Ref, RefOrder>;
  struct Holder {
    size_t bytes = 0;  // what its entries cost
    Expiring entries;
  };
  // How a put makes room: the entry of its key that gives way (if one does), and the number of entries the giver
  // gives up, soonest to expire first, to the node's byte budget.
  struct Room {
    std::optional<Entries::iterator> in_key;
    std::string giver;
    size_t from_giver = 0;
  };

  static size_t held_by(const KeyData& k, const std::string& origin);  // entries of `k` from `origin` ("": none)
  // Whether the origin's quotas refuse an entry costing `cost` under `subkey` of `k` (null: a new key), whose entry
  // there now is `held` (null: a new subkey).
  bool quota_refuses(const KeyData* k, const std::string& subkey, const Stored* held, size_t cost,
                     const std::string& origin) const;
  // The room an entry costing `cost` from `origin` needs under `subkey` of `key` (`key_it`: its data, or end()),
  // whose entry there now is `held` (null: a new subkey); none when no origin gives way to it.
  std::optional<Room> room_for(Keys::iterator key_it, const NodeId& key, const std::string& subkey, const Stored* held,
                               size_t cost, const std::string& origin);
  // The entry of a full `k` that gives way to a new subkey from `origin`, or end() (see the header).
  static Entries::iterator gives_way_in_key(KeyData& k, const std::string& origin);
  void make_room(const Room& room, const NodeId& key, const std::string& subkey);
  // Stores an entry; removes one (and its key when left empty, unless it is `keep`).
  void insert(Keys::iterator key_it, const std::string& subkey, Stored s);
  void remove(Keys::iterator key_it, Entries::iterator e, const NodeId* keep = nullptr);
  void tally(Keys::iterator key_it, Entries::iterator e, bool add);  // bytes, holders, indexes
  Options opt_;
  Keys data_;
  size_t bytes_ = 0;
  Expiring expiring_;                      // every entry
  std::map<std::string, Holder> holders_;  // by origin, this node's own ("") included
  // Every holder but this node, the largest first (among equals, the first in origin order).
  struct LargestFirst {
    bool operator()(const std::pair<size_t, std::string>& a, const std::pair<size_t, std::string>& b) const {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    }
  };
  std::set<std::pair<size_t, std::string>, LargestFirst> by_bytes_;  // (bytes, origin)
};

}  // namespace corolla
