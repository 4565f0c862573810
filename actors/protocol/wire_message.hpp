// COROLLA_WIRE_MESSAGE(T): declares the Cap'n Proto encoding of a message type T and the CAF inspector that
// uses it. encode() writes T to bytes, write() streams it straight into CAF's serializer, pieces() lists the bytes
// encode() would make without copying the large ones (what a stream's chunks are cut from), decode() reads it in
// place (problems land in T::wire_error; a malformed message never fails deserialization, which would drop it
// silently). The definitions come from COROLLA_WIRE_CODEC (wire_codec.hpp) plus a fill() and a decode() per type.
#pragma once

#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>
#include <memory>
#include <type_traits>
#include <vector>

namespace corolla {

// A message's flat Cap'n Proto bytes as pieces in order. Large pieces point into the message's own memory (its
// tensors, the builder's segments); small ones (the segment table, small segments) are copied together. `keep`
// holds all of it alive.
struct wire_pieces {
  struct piece {
    const char* data;
    size_t size;
  };
  std::vector<piece> pieces;
  size_t size = 0;
  std::shared_ptr<const void> keep;
};

// Reads the byte sequence a message arrives as. The length in front of it is the sender's word: it is believed only
// up to the bytes that actually follow (CAF's own reading of a std::vector<char> sizes the vector first, so a
// frame of a few bytes announcing 4 GiB allocated 4 GiB). A length beyond them is end_of_stream, as any truncation.
caf::error read_wire_bytes(caf::deserializer& source, std::vector<char>& bytes);

}  // namespace corolla

#define COROLLA_WIRE_MESSAGE(T)                                         \
  std::vector<char> encode(const T& x);                                 \
  ::corolla::wire_pieces pieces(const T& x);                            \
  caf::error write(const T& x, caf::serializer& sink);                  \
  void decode(std::shared_ptr<std::vector<char>> bytes, T& x);          \
  template <class Inspector>                                            \
  typename Inspector::result_type inspect(Inspector& f, T& x) {         \
    if constexpr (std::is_same_v<Inspector, caf::serializer>) {         \
      return write(x, f);                                               \
    } else if constexpr (Inspector::reads_state) {                      \
      return f(caf::meta::type_name(#T));                               \
    } else {                                                            \
      auto bytes = std::make_shared<std::vector<char>>();               \
      if (auto err = ::corolla::read_wire_bytes(f, *bytes)) return err; \
      decode(std::move(bytes), x);                                      \
      return caf::error{};                                              \
    }                                                                   \
  }
