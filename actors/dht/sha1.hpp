// SHA-1 (FIPS 180-4): DHT keys are the SHA-1 of the key string, as in Kademlia and hivemind. Plain C++.
//
//   Sha1Digest d = sha1("llama.12");
//   Sha1 h; h.update(part1); h.update(part2); Sha1Digest d2 = h.finish();
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace corolla {

using Sha1Digest = std::array<uint8_t, 20>;

class Sha1 {
 public:
  Sha1();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest of everything given to update(); the object must not be used afterwards.
  Sha1Digest finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[5];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes
};

Sha1Digest sha1(std::string_view data);
// Lower-case hexadecimal.
std::string to_hex(const Sha1Digest& d);

}  // namespace corolla
