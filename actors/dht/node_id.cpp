#include "actors/dht/node_id.hpp"

#include <algorithm>
#include <cstring>

namespace corolla {

NodeId xor_distance(const NodeId& a, const NodeId& b) {
  NodeId d;
  for (size_t i = 0; i < kIdBytes; ++i) d[i] = a[i] ^ b[i];
  return d;
}

bool closer(const NodeId& a, const NodeId& b, const NodeId& target) {
  for (size_t i = 0; i < kIdBytes; ++i) {
    const uint8_t da = a[i] ^ target[i], db = b[i] ^ target[i];
    if (da != db) return da < db;
  }
  return false;
}

int common_prefix_length(const NodeId& a, const NodeId& b) {
  for (size_t i = 0; i < kIdBytes; ++i) {
    const uint8_t x = a[i] ^ b[i];
    if (x != 0) {
      int lead = 0;
      for (uint8_t m = 0x80; (x & m) == 0; m >>= 1) ++lead;
      return static_cast<int>(i) * 8 + lead;
    }
  }
  return kIdBits;
}

int bucket_index(const NodeId& self, const NodeId& other) { return kIdBits - 1 - common_prefix_length(self, other); }

NodeId random_id_in_bucket(const NodeId& self, int index, std::mt19937_64& rng) {
  NodeId out = self;
  const int flip = kIdBits - 1 - index;  // bit position counted from the most significant bit
  for (int bit = flip; bit < kIdBits; ++bit) {
    const size_t byte = static_cast<size_t>(bit / 8);
    const uint8_t mask = static_cast<uint8_t>(0x80 >> (bit % 8));
    const bool set = bit == flip ? (self[byte] & mask) == 0 : (rng() & 1) != 0;
    out[byte] = set ? static_cast<uint8_t>(out[byte] | mask) : static_cast<uint8_t>(out[byte] & ~mask);
  }
  return out;
}

std::mt19937_64 rng_from_id(const NodeId& id, uint64_t salt) {
  std::array<uint32_t, 7> words{};
  for (size_t i = 0; i < kIdBytes; ++i) words[i / 4] |= uint32_t{id[i]} << (8 * (i % 4));
  words[5] = static_cast<uint32_t>(salt);
  words[6] = static_cast<uint32_t>(salt >> 32);
  std::seed_seq seq(words.begin(), words.end());
  return std::mt19937_64(seq);
}

std::string id_bytes(const NodeId& id) { return std::string(reinterpret_cast<const char*>(id.data()), id.size()); }

std::optional<NodeId> id_from_bytes(std::string_view bytes) {
  if (bytes.size() != kIdBytes) return std::nullopt;
  NodeId id;
  std::memcpy(id.data(), bytes.data(), kIdBytes);
  return id;
}

std::string id_hex(const NodeId& id) { return to_hex(id); }
std::string short_hex(const NodeId& id) { return to_hex(id).substr(0, 8); }

}  // namespace corolla
