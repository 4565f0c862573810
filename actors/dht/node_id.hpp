// Kademlia ids: 160-bit numbers (20 bytes, most significant byte first). A node's id is its NodeStore node key;
// a key's id is the SHA-1 of the key string. Distance is XOR, compared as a 160-bit number. Plain C++.
//
// Bucket index of a contact, seen from node `self`: the position of the highest bit in which their ids differ,
// 159 (the far half of the id space) down to 0 (the contact differing only in the last bit).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "actors/dht/sha1.hpp"

namespace corolla {

using NodeId = std::array<uint8_t, 20>;
inline constexpr size_t kIdBytes = 20;
inline constexpr int kIdBits = 160;

// The id of a DHT key ("llama.12").
inline NodeId key_id(std::string_view key) { return sha1(key); }

NodeId xor_distance(const NodeId& a, const NodeId& b);

// Hashes an id by its last 8 bytes: random in every id (SHA-1 outputs, random node ids), while the first bytes of
// the contacts near a node's own id repeat its own.
struct id_hash {
  size_t operator()(const NodeId& id) const noexcept {
    uint64_t h = 0;
    for (size_t i = kIdBytes - 8; i < kIdBytes; ++i) h = (h << 8) | id[i];
    return static_cast<size_t>(h);
  }
};

// The order of std::less<NodeId> (bytes as unsigned, the first most significant), compared a word at a time
// rather than by a memcmp call: the maps keyed by id or XOR distance (a lookup's candidates, the storage)
// compare ids at every step.
struct id_less {
  static uint64_t word(const uint8_t* p, size_t n) {
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i) w = (w << 8) | p[i];
    return w;
  }
  bool operator()(const NodeId& a, const NodeId& b) const {
    for (size_t at = 0; at < kIdBytes; at += 8) {
      const size_t n = kIdBytes - at < 8 ? kIdBytes - at : 8;
      const uint64_t x = word(a.data() + at, n), y = word(b.data() + at, n);
      if (x != y) return x < y;
    }
    return false;
  }
};
// True when `a` is strictly closer to `target` than `b`.
bool closer(const NodeId& a, const NodeId& b, const NodeId& target);
// Number of leading bits in which a and b agree (160 when equal).
int common_prefix_length(const NodeId& a, const NodeId& b);
// 159 - common_prefix_length(self, other); -1 when the ids are equal.
int bucket_index(const NodeId& self, const NodeId& other);
// A random id in bucket `index` of `self`: self's bits above `index`, bit `index` flipped, the rest random.
NodeId random_id_in_bucket(const NodeId& self, int index, std::mt19937_64& rng);
// An RNG seeded from an id (and a salt, e.g. a bucket index): actors draw from it, never from random_device.
std::mt19937_64 rng_from_id(const NodeId& id, uint64_t salt = 0);

// The 20 bytes as a string (the wire form), and back: nullopt unless exactly 20 bytes.
std::string id_bytes(const NodeId& id);
std::optional<NodeId> id_from_bytes(std::string_view bytes);
// Lower-case hexadecimal; short_hex: the first 8 digits (for logs).
std::string id_hex(const NodeId& id);
std::string short_hex(const NodeId& id);

}  // namespace corolla
