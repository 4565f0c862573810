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

namespace {

// Pieces at least this large are referenced where they lie; smaller ones are copied (the segment table exists
// only while writeMessage runs).
constexpr size_t kReferencedPiece = 64 * 1024;

struct gathered {
  std::shared_ptr<capnp::MessageBuilder> mb;
  std::shared_ptr<const void> held;
  std::vector<std::vector<char>> copies;  // moving a vector keeps its buffer: pieces may point into them
};

}  // namespace

::corolla::wire_pieces gather(std::shared_ptr<capnp::MessageBuilder> mb, std::shared_ptr<const void> held) {
  auto owned = std::make_shared<gathered>();
  owned->mb = std::move(mb);
  owned->held = std::move(held);
  ::corolla::wire_pieces out;
  struct Recorder final : kj::OutputStream {
    Recorder(gathered& g, ::corolla::wire_pieces& p) : g(g), p(p) {}
    void flush_small() {
      if (small.empty()) return;
      g.copies.push_back(std::move(small));
      small = {};
      p.pieces.push_back({g.copies.back().data(), g.copies.back().size()});
    }
    void write(const void* buffer, size_t size) override {
      p.size += size;
      if (size < kReferencedPiece) {
        small.insert(small.end(), static_cast<const char*>(buffer), static_cast<const char*>(buffer) + size);
        return;
      }
      flush_small();
      p.pieces.push_back({static_cast<const char*>(buffer), size});
    }
    gathered& g;
    ::corolla::wire_pieces& p;
    std::vector<char> small;
  } rec(*owned, out);
  capnp::writeMessage(rec, *owned->mb);
  rec.flush_small();
  out.keep = std::move(owned);
  return out;
}

}  // namespace corolla::wire_codec
