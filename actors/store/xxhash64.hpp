// xxHash64 (XXH64 of Yann Collet's xxHash, https://github.com/Cyan4973/xxHash): a fast 64-bit non-cryptographic
// hash. It checks the integrity of stored records (a flipped bit or a torn write changes it) and names model
// versions; it does not resist deliberate forgery. Results equal the reference implementation's XXH64(data, size,
// seed); tests/unit/test_node_store.cpp holds known answers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace corolla::store {

uint64_t xxhash64(const void* data, size_t size, uint64_t seed);

// The same hash over data given in pieces: update() any number of times, then digest().
class XxHash64 {
 public:
  explicit XxHash64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  uint64_t digest() const;

 private:
  uint64_t seed_;
  std::array<uint64_t, 4> acc_;
  std::array<unsigned char, 32> pending_{};  // bytes not yet folded into acc_ (fewer than 32)
  size_t pending_size_ = 0;
  uint64_t total_ = 0;
};

}  // namespace corolla::store
