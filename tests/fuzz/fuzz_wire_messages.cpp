// Every message a server, client or DHT node decodes from a peer (actors/protocol/messages.hpp,
// actors/dht/dht_messages.hpp): the first byte picks the type, the rest is its Cap'n Proto bytes as they arrive.
// With the first byte's high bit set, the rest is what CAF's deserializer reads instead (a length, then the bytes):
// a length beyond the bytes present must be refused before anything is allocated.
// A decoded message either names its problem in wire_error or is safe to read: every tensor's bytes lie inside the
// received buffer.
#include <caf/binary_deserializer.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "actors/dht/dht_messages.hpp"
#include "actors/protocol/messages.hpp"

namespace {

using namespace corolla;

volatile uint8_t sink;
bool framed = false;  // the input is a CAF frame's payload, not the bare Cap'n Proto bytes

void touch(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return;
  const auto* p = static_cast<const uint8_t*>(t.data());
  uint8_t acc = 0;
  for (int64_t i = 0; i < t.nbytes(); i += 61) acc ^= p[i];
  acc ^= p[t.nbytes() - 1];
  sink = acc;
}

template <class T, class Touch>
void run(const uint8_t* data, size_t size, Touch touch_fields) {
  T x;
  if (framed) {
    caf::binary_deserializer source(nullptr, reinterpret_cast<const char*>(data), size);
    if (source(x)) return;
  } else {
    auto bytes = std::make_shared<std::vector<char>>(size);
    if (size) std::memcpy(bytes->data(), data, size);
    decode(bytes, x);
  }
  if (x.wire_error.empty()) touch_fields(x);
}

template <class T>
void run(const uint8_t* data, size_t size) {
  run<T>(data, size, [](const T&) {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t kind = data[0] & 0x7f;
  framed = (data[0] & 0x80) != 0;
  ++data, --size;
  switch (kind % 21) {
    case 0: run<info_request>(data, size); break;
    case 1: run<server_info>(data, size); break;
    case 2: run<open_session>(data, size, [](const open_session& m) { touch(m.prompts); }); break;
    case 3: run<session_opened>(data, size); break;
    case 4: run<step_request>(data, size, [](const step_request& m) { touch(m.hidden); }); break;
    case 5: run<step_reply>(data, size, [](const step_reply& m) { touch(m.hidden); }); break;
    case 6:
      run<forward_request>(data, size, [](const forward_request& m) { touch(m.hidden), touch(m.prompts); });
      break;
    case 7: run<forward_reply>(data, size, [](const forward_reply& m) { touch(m.hidden); }); break;
    case 8:
      run<backward_request>(data, size,
                            [](const backward_request& m) { touch(m.hidden), touch(m.grad_output), touch(m.prompts); });
      break;
    case 9:
      run<backward_reply>(data, size, [](const backward_reply& m) { touch(m.grad_input), touch(m.grad_prompts); });
      break;
    case 10: run<close_session>(data, size); break;
    case 11: run<ack>(data, size); break;
    case 12: run<bandwidth_probe>(data, size); break;
    case 13:
      run<wire_chunk>(data, size, [](const wire_chunk& m) {
        if (m.size) sink = static_cast<uint8_t>(m.data[0] ^ m.data[m.size - 1]);
      });
      break;
    case 14: run<dht_ping_request>(data, size); break;
    case 15: run<dht_ping_reply>(data, size); break;
    case 16: run<dht_find_node_request>(data, size); break;
    case 17: run<dht_find_node_reply>(data, size); break;
    case 18: run<dht_find_value_request>(data, size); break;
    case 19: run<dht_find_value_reply>(data, size); break;
    default: run<dht_store_request>(data, size); break;
  }
  return 0;
}
