// Little-endian encoding of fixed-width integers and doubles, for the node store's records (whatever the host's
// byte order).
#pragma once

#include <bit>
#include <cstdint>
#include <string>

namespace corolla::store {

template <class T>
void put_le(std::string& out, T value) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

inline void put_le_double(std::string& out, double value) { put_le(out, std::bit_cast<uint64_t>(value)); }

// Reads a T at p (no bounds check: the caller has checked the length).
template <class T>
T get_le(const char* p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u |= static_cast<U>(static_cast<unsigned char>(p[i])) << (8 * i);
  return static_cast<T>(u);
}

inline double get_le_double(const char* p) { return std::bit_cast<double>(get_le<uint64_t>(p)); }

}  // namespace corolla::store
