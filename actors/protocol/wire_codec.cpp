#include "actors/protocol/wire_codec.hpp"

namespace corolla::wire_codec {

std::vector<char> flatten(capnp::MessageBuilder& mb) {
  const size_t words = capnp::computeSerializedSizeInWords(mb);
  std::vector<char> out(words * sizeof(capnp::word));
  kj::ArrayOutputStream os(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.data()), out.size()));
  capnp::writeMessage(os, mb);
  return out;
}

caf::error stream(capnp::MessageBuilder& mb, caf::serializer& sink) {
  struct SinkStream final : kj::OutputStream {
    explicit SinkStream(caf::serializer& s) : sink(s) {}
    void write(const void* buffer, size_t size) override {
      if (!err) err = sink.apply_raw(size, const_cast<void*>(buffer));
    }
    caf::serializer& sink;
    caf::error err;
  } out(sink);
  size_t bytes = capnp::computeSerializedSizeInWords(mb) * sizeof(capnp::word);
  if (auto err = sink.begin_sequence(bytes)) return err;
  capnp::writeMessage(out, mb);
  if (out.err) return std::move(out.err);
  return sink.end_sequence();
}

}  // namespace corolla::wire_codec
