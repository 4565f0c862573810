// One Kademlia k-bucket's rules, as plain code (the bucket actor wraps it and does the pinging):
//   - contacts are kept least recently seen first; a contact seen again moves to the end;
//   - a new contact enters while the bucket holds fewer than k; otherwise it waits in a small replacement cache
//     (most recent kept) and the owner pings the least recently seen contact: old contacts that stay alive are
//     preferred (Kademlia's rule), so only a failed ping lets a newcomer in;
//   - a contact is evicted after `max_failures` failed RPCs in a row (a success resets the count), or at once when
//     it failed the ping for a waiting replacement; the freshest replacement then takes its place.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "actors/dht/node_id.hpp"

namespace corolla {

struct Contact {
  NodeId id{};
  std::string address;  // "HOST:PORT", resolved through the connector
  bool operator==(const Contact&) const = default;
};

class KBucket {
 public:
  struct Options {
    size_t k = 20;
    size_t max_failures = 3;
    size_t replacement_slots = 20;
  };
  enum class Seen {
    added,        // the contact entered the bucket
    updated,      // it was there: moved to the end (most recently seen), failures reset, address updated
    replacement,  // the bucket is full: the contact waits in the replacement cache; ping least_recent()
  };

  KBucket() : KBucket(Options{}) {}
  explicit KBucket(Options o) : opt_(o) {}

  Seen seen(const Contact& c);
  // An RPC to `id` failed. `stale`: it failed the liveness ping made for a waiting replacement. Returns true when
  // the contact left the bucket (a replacement, if any, took its place). A waiting replacement that fails is
  // dropped from the cache.
  bool failed(const NodeId& id, bool stale = false);

  // The contact to ping when the bucket is full; nullptr when empty.
  const Contact* least_recent() const { return entries_.empty() ? nullptr : &entries_.front().contact; }
  bool contains(const NodeId& id) const;
  size_t size() const { return entries_.size(); }
  bool full() const { return entries_.size() >= opt_.k; }
  size_t failures(const NodeId& id) const;
  // Least recently seen first.
  std::vector<Contact> contacts() const;
  // Oldest first.
  const std::vector<Contact>& replacements() const { return replacements_; }

 private:
  struct Entry {
    Contact contact;
    size_t failures = 0;
  };
  void promote_replacement();

  Options opt_;
  std::vector<Entry> entries_;
  std::vector<Contact> replacements_;
};

// The `n` contacts closest to `target` (XOR distance), closest first.
std::vector<Contact> closest_contacts(std::vector<Contact> contacts, const NodeId& target, size_t n);

}  // namespace corolla
