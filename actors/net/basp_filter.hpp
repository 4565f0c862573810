// What a peer may send to this node over CAF's BASP protocol, judged frame by frame before CAF sees it.
//
// CAF 0.17's BASP trusts its peers: a routed message may name any source node, a down message may kill the proxy
// of any node's actor, a message may carry any registered type (atoms, exit messages: the control messages
// between a node's own actors), a named receiver reaches CAF's own utility actors, and a frame header makes CAF
// allocate the length it announces. The peer gateway (peer_gateway.hpp) runs every frame a peer sends through
// a BaspFilter; only what passes reaches CAF:
//   - the handshake first (a server handshake from a node we connected to, a client handshake from one that
//     connected to us), naming a node that is not this one; later handshakes must name the same node;
//   - messages carry exactly the peer protocol: one Corolla wire type ("corolla.*") whose byte buffer ends the
//     frame, an error, or nothing (a void reply); no forwarding stages, no named receivers;
//   - routed messages only to this node, from the peer or from a node with a connection of its own (a relayed
//     request names its client, which reaches us directly too); monitor and down messages only about the
//     peer's own actors;
//   - a frame no larger than the limit, a handshake no larger than its own.
// A frame that breaks the protocol closes the connection; a well-formed frame that is not ours to obey (an atom,
// a routed message for another node) is dropped and counted.
//
// Plain C++ over bytes (no sockets), so it is unit-tested and fuzzed on its own (tests/fuzz/fuzz_basp_filter.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace corolla {

// A CAF node id as it travels: the implementation atom, the process id and the 20-byte host hash.
using basp_node_id = std::array<uint8_t, 32>;

constexpr size_t kBaspHeaderSize = 32;

enum class basp_side { accepted, connected };  // the peer connected to us / we connected to the peer

struct basp_verdict {
  enum kind_t { pass, drop, close } kind = pass;
  const char* why = "";  // for drops and closes: what was wrong (static text)
};

// What the gateway should do after a header: read the whole payload (or `judge_bytes` of it, for a frame too
// large to hold) and call on_payload, or act on `verdict` at once.
struct basp_header_verdict {
  basp_verdict verdict;
  uint32_t payload_bytes = 0;  // announced payload length
  uint32_t judge_bytes = 0;    // bytes of the payload on_payload needs (== payload_bytes unless it is large)
};

struct basp_filter_limits {
  uint32_t max_frame_bytes = 64u << 20;      // payload of any frame
  uint32_t max_handshake_bytes = 16u << 10;  // payload of a handshake
  uint32_t whole_frame_bytes = 64u << 10;    // larger payloads are judged on a prefix and streamed
  uint32_t prefix_bytes = 4u << 10;          // the prefix a large payload is judged on
};

class BaspFilter {
 public:
  // `known_node`: whether a node has a live connection to this one (a routed message's source must).
  // `claim`: called once when the handshake names the peer; false quarantines the connection: nothing more it
  // sends passes (the gateway quarantines a second inbound connection that claims a node already connected,
  // which would otherwise become CAF's route to that node; a real second connection is one CAF's peer closes
  // itself as redundant once it has the handshake, which still goes out).
  BaspFilter(basp_side side, const basp_node_id& self, basp_filter_limits limits,
             std::function<bool(const basp_node_id&)> known_node, std::function<bool(const basp_node_id&)> claim);

  basp_header_verdict on_header(const uint8_t* header);
  // `payload` holds `size` bytes: the whole payload, or its first judge_bytes for a large frame.
  basp_verdict on_payload(const uint8_t* payload, size_t size);

  // The node the peer's handshake named, once it has.
  const std::optional<basp_node_id>& peer() const { return peer_; }

  // The atom CAF writes for its default node-id implementation, as bytes (for tests and fuzz seeds).
  static std::array<uint8_t, 8> default_node_impl();

 private:
  basp_verdict judge_handshake(const uint8_t* p, size_t n);
  basp_verdict judge_message(const uint8_t* p, size_t n, bool whole);

  basp_side side_;
  basp_node_id self_;
  basp_filter_limits limits_;
  std::function<bool(const basp_node_id&)> known_node_;
  std::function<bool(const basp_node_id&)> claim_;
  std::optional<basp_node_id> peer_;
  bool quarantined_ = false;
  // The header being judged.
  uint8_t op_ = 0, flags_ = 0;
  uint32_t payload_len_ = 0;
  uint64_t op_data_ = 0, source_actor_ = 0, dest_actor_ = 0;
};

}  // namespace corolla
