// Functions shared by the Cap'n Proto encodings of wire messages (messages.cpp, actors/dht/dht_messages.cpp).
// Include only from .cpp files: it pulls in Cap'n Proto.
//
//   void fill(const my_msg& x, capnp::MessageBuilder& mb) { wire_codec::fill_root<wire::MyMsg>(mb, ...); }
//   void decode(std::shared_ptr<std::vector<char>> bytes, my_msg& x) { wire_codec::parse<wire::MyMsg>(...); }
//   COROLLA_WIRE_CODEC(my_msg)   // encode(), pieces() and write() from fill()
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>

#include <caf/error.hpp>
#include <caf/serializer.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol/wire_message.hpp"

namespace corolla::wire_codec {

// Fills a message of root type W: fill(builder, orphanage).
template <class W, class Fill>
void fill_root(capnp::MessageBuilder& mb, Fill fill) {
  fill(mb.template initRoot<W>(), mb.getOrphanage());
}

// The flat format (segment table, then segments) as one byte vector.
std::vector<char> flatten(capnp::MessageBuilder& mb);

// The flat format written straight into CAF's serializer, as the byte sequence a std::vector<char> would be
// (the receiver reads it into one), without an intermediate copy.
caf::error stream(capnp::MessageBuilder& mb, caf::serializer& sink);

// The flat format of a filled builder as pieces (wire_pieces), keeping `mb` and `held` (the message it references)
// alive.
::corolla::wire_pieces gather(std::shared_ptr<capnp::MessageBuilder> mb, std::shared_ptr<const void> held);

// Reads a message of root type W in place: read(reader, keep), where `keep` holds the bytes alive for views into
// them. Problems land in `wire_error`, never in an exception.
template <class W, class Read>
void parse(std::shared_ptr<std::vector<char>> bytes, std::string& wire_error, Read read) {
  try {
    if (bytes->size() % sizeof(capnp::word) != 0 || reinterpret_cast<uintptr_t>(bytes->data()) % 8 != 0) {
      wire_error = "malformed message: " + std::to_string(bytes->size()) + " bytes are not whole 8-byte words";
      return;
    }
    capnp::ReaderOptions options;
    options.traversalLimitInWords = bytes->size() / sizeof(capnp::word) + 1024;
    options.nestingLimit = 16;
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(bytes->data()), bytes->size() / sizeof(capnp::word)),
        options);
    std::shared_ptr<const void> keep = bytes;
    read(reader.template getRoot<W>(), keep);
  } catch (const kj::Exception& e) {
    wire_error = "malformed message: " + std::string(e.getDescription().cStr());
  } catch (const std::exception& e) {
    wire_error = std::string("malformed message: ") + e.what();
  }
}

}  // namespace corolla::wire_codec

// encode(), pieces() and write() for T, from a `void fill(const T&, capnp::MessageBuilder&)` in scope.
#define COROLLA_WIRE_CODEC(T)                                             \
  std::vector<char> encode(const T& x) {                                  \
    capnp::MallocMessageBuilder mb;                                       \
    fill(x, mb);                                                          \
    return ::corolla::wire_codec::flatten(mb);                            \
  }                                                                       \
  ::corolla::wire_pieces pieces(const T& x) {                             \
    auto held = std::make_shared<const T>(x); /* shares the tensors */    \
    auto mb = std::make_shared<capnp::MallocMessageBuilder>();            \
    fill(*held, *mb);                                                     \
    return ::corolla::wire_codec::gather(std::move(mb), std::move(held)); \
  }                                                                       \
  caf::error write(const T& x, caf::serializer& sink) {                   \
    capnp::MallocMessageBuilder mb;                                       \
    fill(x, mb);                                                          \
    return ::corolla::wire_codec::stream(mb, sink);                       \
  }
