#include "actors/net/basp_filter.hpp"

#include <caf/atom.hpp>
#include <cstring>
#include <string_view>

namespace corolla {
namespace {

// BASP operations (caf/io/basp/message_type.hpp).
enum : uint8_t {
  kServerHandshake = 0,
  kClientHandshake = 1,
  kDirectMessage = 2,
  kRoutedMessage = 3,
  kMonitorMessage = 4,
  kDownMessage = 5,
  kHeartbeat = 6,
};

constexpr basp_verdict pass() { return {basp_verdict::pass, ""}; }
constexpr basp_verdict drop(const char* why) { return {basp_verdict::drop, why}; }
constexpr basp_verdict close(const char* why) { return {basp_verdict::close, why}; }

// Reads CAF's binary encoding (big-endian integers, varbyte lengths) and never past its end.
class reader {
 public:
  reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool done() const { return p_ == end_; }

  bool u8(uint8_t& x) { return fixed(x); }
  bool u16(uint16_t& x) { return fixed(x); }
  bool u32(uint32_t& x) { return fixed(x); }
  bool u64(uint64_t& x) { return fixed(x); }

  // A sequence length: 7 bits a byte, low bits first, at most 32 bits.
  bool length(uint32_t& x) {
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        if (v > UINT32_MAX) return false;
        x = static_cast<uint32_t>(v);
        return true;
      }
    }
    return false;
  }

  bool string(std::string_view& s) {
    uint32_t n = 0;
    if (!length(n) || n > left()) return false;
    s = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }

  bool skip(size_t n) {
    if (n > left()) return false;
    p_ += n;
    return true;
  }

  bool node(basp_node_id& id) {
    if (left() < id.size()) return false;
    std::memcpy(id.data(), p_, id.size());
    if (std::memcmp(id.data(), BaspFilter::default_node_impl().data(), 8) != 0) return false;
    p_ += id.size();
    return true;
  }

 private:
  template <class T>
  bool fixed(T& x) {
    if (left() < sizeof(T)) return false;
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>((v << 8) | p_[i]);
    p_ += sizeof(T);
    x = v;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// The built-in types an error's context may hold, with their encoded sizes (0: a string).
bool skip_context_value(reader& r, std::string_view type) {
  static constexpr std::pair<std::string_view, size_t> fixed[] = {
      {"@i8", 1},  {"@u8", 1},  {"@i16", 2}, {"@u16", 2},  {"@i32", 4},
      {"@u32", 4}, {"@i64", 8}, {"@u64", 8}, {"@atom", 8},
  };
  if (type == "@str") {
    std::string_view s;
    return r.string(s);
  }
  for (const auto& [name, size] : fixed)
    if (type == name) return r.skip(size);
  return false;
}

// A message's type names: "@<>" or "@<>+" followed by names joined by '+'.
bool split_types(std::string_view tname, std::vector<std::string_view>& types) {
  if (tname == "@<>") return true;
  if (tname.substr(0, 4) != "@<>+") return false;
  tname.remove_prefix(4);
  while (true) {
    const auto plus = tname.find('+');
    types.push_back(tname.substr(0, plus));
    if (types.back().empty() || types.size() > 8) return false;
    if (plus == std::string_view::npos) return true;
    tname.remove_prefix(plus + 1);
  }
}

// An error (code, category atom, context message of built-in values); false when it is anything else.
bool read_error(reader& r) {
  uint8_t code = 0;
  uint64_t category = 0;
  uint16_t type_nr = 0;
  std::string_view tname;
  std::vector<std::string_view> types;
  if (!r.u8(code) || !r.u64(category) || !r.u16(type_nr) || type_nr != 0 || !r.string(tname) ||
      !split_types(tname, types))
    return false;
  for (auto type : types)
    if (!skip_context_value(r, type)) return false;
  return true;
}

}  // namespace

std::array<uint8_t, 8> BaspFilter::default_node_impl() {
  const auto atom = static_cast<uint64_t>(caf::atom("default"));
  std::array<uint8_t, 8> bytes{};
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(atom >> (56 - 8 * i));
  return bytes;
}

BaspFilter::BaspFilter(basp_side side, const basp_node_id& self, basp_filter_limits limits,
                       std::function<bool(const basp_node_id&)> known_node,
                       std::function<bool(const basp_node_id&)> claim)
    : side_(side), self_(self), limits_(limits), known_node_(std::move(known_node)), claim_(std::move(claim)) {}

basp_header_verdict BaspFilter::on_header(const uint8_t* h) {
  reader r(h, kBaspHeaderSize);
  uint8_t pad1 = 0, pad2 = 0;
  r.u8(op_), r.u8(pad1), r.u8(pad2), r.u8(flags_), r.u32(payload_len_), r.u64(op_data_), r.u64(source_actor_),
      r.u64(dest_actor_);
  basp_header_verdict v;
  v.payload_bytes = payload_len_;
  v.judge_bytes = payload_len_;
  const bool handshake = op_ == kServerHandshake || op_ == kClientHandshake;
  if (quarantined_) {
    // Read and dropped, so the peer's side of the handshake can finish; small frames only.
    if (payload_len_ > limits_.max_handshake_bytes)
      v.verdict = close("quarantined connection sends too much");
    else if (payload_len_ == 0)
      v.verdict = drop("connection of a node already connected");
    return v;
  }
  if (op_ > kHeartbeat) {
    v.verdict = close("unknown operation");
  } else if (!peer_ && !handshake) {
    v.verdict = close("message before the handshake");
  } else if (payload_len_ > (handshake ? limits_.max_handshake_bytes : limits_.max_frame_bytes)) {
    v.verdict = close("frame too large");
  } else if (op_ == kHeartbeat) {
    v.verdict = payload_len_ == 0 && source_actor_ == 0 && dest_actor_ == 0 && op_data_ == 0
                    ? pass()
                    : close("malformed heartbeat");
  } else if (payload_len_ == 0) {
    v.verdict = close("frame without payload");
  } else if (payload_len_ > limits_.whole_frame_bytes) {
    // Only a message can be this large; it is judged on its beginning, which names its type and length.
    if (op_ != kDirectMessage && op_ != kRoutedMessage) v.verdict = close("frame too large");
    v.judge_bytes = std::min(payload_len_, limits_.prefix_bytes);
  }
  return v;
}

basp_verdict BaspFilter::on_payload(const uint8_t* p, size_t n) {
  if (n > payload_len_) return close("payload longer than announced");
  if (quarantined_) return drop("connection of a node already connected");
  const bool whole = n == payload_len_;
  switch (op_) {
    case kServerHandshake:
    case kClientHandshake: return whole ? judge_handshake(p, n) : close("partial handshake");
    case kDirectMessage:
    case kRoutedMessage: return judge_message(p, n, whole);
    case kMonitorMessage:
    case kDownMessage: {
      if (!whole) return close("partial control frame");
      reader r(p, n);
      basp_node_id source{}, dest{};
      if (!r.node(source) || !r.node(dest)) return close("malformed monitor or down message");
      if (op_ == kMonitorMessage && (op_data_ != 0 || !r.done())) return close("malformed monitor message");
      if (op_ == kDownMessage &&
          (source_actor_ == 0 || dest_actor_ != 0 || op_data_ != 0 || !read_error(r) || !r.done()))
        return close("malformed down message");
      // A peer speaks only for its own actors.
      if (source != *peer_ || dest != self_) return close("monitor or down message about another node");
      return pass();
    }
    default: return close("unknown operation");
  }
}

basp_verdict BaspFilter::judge_handshake(const uint8_t* p, size_t n) {
  reader r(p, n);
  basp_node_id node{};
  if (!r.node(node)) return close("handshake without a node id");
  if (op_ == kServerHandshake) {
    // Only the side that connected receives the server's handshake, once, first.
    if (side_ != basp_side::connected || peer_) return close("unexpected server handshake");
    uint32_t count = 0;
    std::string_view s;
    uint64_t actor = 0;
    if (op_data_ == 0 || !r.length(count)) return close("malformed server handshake");
    for (uint32_t i = 0; i < count; ++i)
      if (!r.string(s)) return close("malformed server handshake");
    if (!r.u64(actor) || !r.length(count)) return close("malformed server handshake");
    for (uint32_t i = 0; i < count; ++i)
      if (!r.string(s)) return close("malformed server handshake");
    if (!r.done()) return close("malformed server handshake");
  } else {
    // CAF's connecting side sends its handshake twice (the second selects this connection).
    if (side_ != basp_side::accepted || source_actor_ != 0 || dest_actor_ != 0 || !r.done())
      return close("unexpected client handshake");
    if (peer_) return node == *peer_ ? pass() : close("handshake names a second node");
  }
  if (node == self_) return close("peer claims this node's id");
  if (!claim_(node)) {
    quarantined_ = true;
    return drop("connection of a node already connected");
  }
  peer_ = node;
  return pass();
}

basp_verdict BaspFilter::judge_message(const uint8_t* p, size_t n, bool whole) {
  if (dest_actor_ == 0) return close("message without a receiver");
  if (flags_ != 0) return drop("named receiver");  // CAF's utility actors are not the peer protocol
  reader r(p, n);
  if (op_ == kRoutedMessage) {
    basp_node_id source{}, dest{};
    if (!r.node(source) || !r.node(dest)) return close("malformed routed message");
    if (source == self_) return close("routed message claims to come from this node");
    if (dest != self_) return drop("routed message for another node");
    if (source != *peer_ && !known_node_(source)) return drop("routed message from an unknown node");
  }
  uint32_t stages = 0;
  uint16_t type_nr = 0;
  std::string_view tname;
  if (!r.length(stages) || !r.u16(type_nr) || !r.string(tname)) return close("malformed message");
  if (stages != 0) return drop("message with forwarding stages");
  if (type_nr != 0) return close("malformed message");
  std::vector<std::string_view> types;
  if (!split_types(tname, types)) return close("malformed message");
  if (types.size() == 1 && types[0].substr(0, 8) == "corolla.") {
    // A wire message: its Cap'n Proto bytes as one buffer that ends the frame. The length is checked here,
    // against the frame, because CAF would allocate whatever it names before reading.
    uint32_t bytes = 0;
    if (!r.length(bytes)) return close("malformed message");
    const size_t consumed = n - r.left();
    if (static_cast<uint64_t>(bytes) + consumed != payload_len_) return close("wire message length mismatch");
    return pass();
  }
  if (!whole) return close("only a wire message may be this large");
  if (types.empty()) return r.done() ? pass() : close("malformed message");
  if (types.size() == 1 && types[0] == "@error") return read_error(r) && r.done() ? pass() : close("malformed error");
  return drop("not a peer protocol message");
}

}  // namespace corolla
