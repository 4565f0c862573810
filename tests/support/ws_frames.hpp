// WebSocket by hand, for tests that send what a well-behaved client library never would: an upgrade over a
// RawSocket, frames with any opcode, length, mask and FIN bit, and the server's next frame read back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/raw_socket.hpp"

namespace corolla::test {

enum class ws_opcode : uint8_t { continuation = 0, text = 1, binary = 2, close = 8, ping = 9, pong = 10 };

// One client frame (masked, as RFC 6455 requires of clients, unless `masked` is false). `announced` > 0 puts
// that length in the header whatever the payload is (a frame that claims more than it carries).
inline std::vector<char> ws_frame(ws_opcode op, const std::string& payload, bool fin = true, bool masked = true,
                                  uint64_t announced = 0) {
  std::vector<char> out;
  out.push_back(static_cast<char>((fin ? 0x80 : 0) | static_cast<uint8_t>(op)));
  const uint64_t n = announced ? announced : payload.size();
  const char mask_bit = masked ? char(0x80) : 0;
  if (n < 126) {
    out.push_back(static_cast<char>(mask_bit | static_cast<char>(n)));
  } else if (n <= 0xffff) {
    out.push_back(static_cast<char>(mask_bit | 126));
    out.push_back(static_cast<char>(n >> 8));
    out.push_back(static_cast<char>(n));
  } else {
    out.push_back(static_cast<char>(mask_bit | 127));
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(n >> (8 * i)));
  }
  const char key[4] = {0x12, 0x34, 0x56, 0x78};
  if (masked) out.insert(out.end(), key, key + 4);
  for (size_t i = 0; i < payload.size(); ++i)
    out.push_back(masked ? static_cast<char>(payload[i] ^ key[i % 4]) : payload[i]);
  return out;
}

// A raw connection upgraded to a WebSocket on `target`; throws when the server does not switch protocols.
inline RawSocket ws_connect(uint16_t port, const std::string& target) {
  RawSocket s(port);
  const std::string upgrade = "GET " + target +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";
  s.write(upgrade.data(), upgrade.size());
  std::string head;
  while (head.find("\r\n\r\n") == std::string::npos) {
    const auto b = s.read_exactly(1, std::chrono::seconds(10));
    if (b.empty()) throw std::runtime_error("no WebSocket upgrade answer from 127.0.0.1:" + std::to_string(port));
    head += b[0];
  }
  if (head.rfind("HTTP/1.1 101", 0) != 0) throw std::runtime_error("upgrade refused: " + head);
  return s;
}

// The payload of the server's next text or binary frame (control frames are skipped), or nullopt when the
// server closes or says nothing within `timeout`.
inline std::optional<std::string> ws_read_message(RawSocket& s,
                                                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  for (;;) {
    auto head = s.read_exactly(2, timeout);
    if (head.size() < 2) return std::nullopt;
    const uint8_t op = static_cast<uint8_t>(head[0]) & 0x0f;
    uint64_t n = static_cast<uint8_t>(head[1]) & 0x7f;
    if (n >= 126) {
      auto ext = s.read_exactly(n == 126 ? 2 : 8, timeout);
      n = 0;
      for (char c : ext) n = (n << 8) | static_cast<uint8_t>(c);
    }
    auto body = s.read_exactly(static_cast<size_t>(n), timeout);
    if (body.size() < n) return std::nullopt;
    if (op == static_cast<uint8_t>(ws_opcode::close)) return std::nullopt;
    if (op == static_cast<uint8_t>(ws_opcode::text) || op == static_cast<uint8_t>(ws_opcode::binary))
      return std::string(body.begin(), body.end());
  }
}

}  // namespace corolla::test
