#include "actors/store/xxhash64.hpp"

#include <cstring>

namespace corolla::store {
namespace {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t P2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t P3 = 0x165667B19E3779F9ULL;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t read64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}

inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * P1 + P4;
}

// Folds whole 32-byte stripes of [p, p + n) (n a multiple of 32) into acc.
inline void stripes(std::array<uint64_t, 4>& acc, const unsigned char* p, size_t n) {
  uint64_t a = acc[0], b = acc[1], c = acc[2], d = acc[3];
  for (const unsigned char* end = p + n; p < end; p += 32) {
    a = round(a, read64(p));
    b = round(b, read64(p + 8));
    c = round(c, read64(p + 16));
    d = round(d, read64(p + 24));
  }
  acc = {a, b, c, d};
}

// The final steps over the last (< 32) bytes.
uint64_t finish(uint64_t h, const unsigned char* p, size_t n) {
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * P1), 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

}  // namespace

XxHash64::XxHash64(uint64_t seed) : seed_(seed), acc_{seed + P1 + P2, seed + P2, seed, seed - P1} {}

void XxHash64::update(const void* data, size_t size) {
  auto* p = static_cast<const unsigned char*>(data);
  total_ += size;
  if (pending_size_ > 0) {
    const size_t take = std::min(size, pending_.size() - pending_size_);
    std::memcpy(pending_.data() + pending_size_, p, take);
    pending_size_ += take;
    p += take;
    size -= take;
    if (pending_size_ < pending_.size()) return;
    stripes(acc_, pending_.data(), pending_.size());
    pending_size_ = 0;
  }
  const size_t whole = size / 32 * 32;
  stripes(acc_, p, whole);
  std::memcpy(pending_.data(), p + whole, size - whole);
  pending_size_ = size - whole;
}

uint64_t XxHash64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge_round(h, a);
  } else {
    h = seed_ + P5;
  }
  h += total_;
  return finish(h, pending_.data(), pending_size_);
}

uint64_t xxhash64(const void* data, size_t size, uint64_t seed) {
  XxHash64 h(seed);
  h.update(data, size);
  return h.digest();
}

}  // namespace corolla::store
