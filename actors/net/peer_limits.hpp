// How much a node gives the peers that connect to it before they prove anything (peer_gateway.hpp).
// Node configs set them under [peers]; the defaults suit a public server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace corolla {

struct peer_limits {
  size_t max_connections = 512;                       // open peer connections, both directions
  size_t max_connections_per_address = 64;            // from one remote IP address
  double new_connections_per_second = 20;             // accepted from one remote IP address (a burst of as many)
  uint32_t max_frame_bytes = 64u << 20;               // one BASP frame (a 64 MiB activation)
  uint32_t max_handshake_bytes = 16u << 10;           // a handshake frame
  uint64_t max_buffered_bytes = 512ull << 20;         // large frames' announced bytes handed to CAF at once, all peers
  std::chrono::milliseconds handshake_timeout{5000};  // from connect to the peer's handshake
  uint64_t min_receive_bytes_per_second = 64u << 10;  // while a frame is arriving, after the grace below
  std::chrono::milliseconds receive_grace{5000};
  std::chrono::milliseconds write_timeout{10000};  // a write to a peer that takes longer closes it
};

}  // namespace corolla
