// The reassembly of streamed messages (actors/protocol/wire_stream.hpp) under any sequence of chunks a peer may
// send: each op adds a chunk (stream id, offset, total and bytes from the input), takes a stream, or lets time
// pass. Small limits, so that they are reached. Besides not crashing, the receiver must keep its bounds: bytes
// reserved for streams never exceed the sender's share of max_buffered_bytes, streams tracked never exceed its share
// of max_streams, and a stream taken whole holds exactly the bytes its chunks carried.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "actors/protocol/wire_stream.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

namespace {

using input = fuzz::input;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stream_limits limits;
  limits.max_message_bytes = 64 << 10;
  limits.max_buffered_bytes = 128 << 10;
  limits.max_streams = 16;
  limits.max_streams_per_peer = 12;  // every chunk here comes from one (anonymous) sender: its share binds first
  limits.max_buffered_bytes_per_peer = 96 << 10;
  limits.timeout = std::chrono::seconds(1);
  inbound_streams in(limits);
  inbound_streams::time_point now{};
  std::map<uint64_t, std::vector<char>> sent;  // what each stream's accepted chunks carried, in order
  input in_bytes{data, size};
  const caf::actor_addr from;
  while (in_bytes.n > 0) {
    switch (in_bytes.take(1) % 4) {
      case 0:
      case 1: {
        wire_chunk c;
        c.stream = in_bytes.take(1) % 24;
        c.offset = in_bytes.take(3);
        c.total = in_bytes.take(3);
        const size_t len = std::min<size_t>(in_bytes.take(2) % 4096, in_bytes.n);
        c.data = reinterpret_cast<const char*>(in_bytes.p);
        c.size = len;
        in_bytes.p += len, in_bytes.n -= len;
        if (in_bytes.take(1) == 0xEE) c.wire_error = "garbled";
        if (in.add(from, c, now).empty()) {
          auto& got = sent[c.stream];
          if (c.offset == 0) got.clear();  // a stream starts at byte 0 (a forgotten one may start again)
          got.insert(got.end(), c.data, c.data + c.size);
        }
        break;
      }
      case 2: {
        const uint64_t id = in_bytes.take(1) % 24;
        std::shared_ptr<std::vector<char>> bytes;
        if (in.take(from, id, bytes).empty()) {
          require(bytes != nullptr);
          require(*bytes == sent[id]);
        }
        sent.erase(id);
        break;
      }
      default:
        now += std::chrono::milliseconds(in_bytes.take(2));
        in.expire(now);
        break;
    }
    require(in.buffered_bytes() <= limits.max_buffered_bytes_per_peer);
    require(in.open_streams() <= limits.max_streams_per_peer);
  }
  return 0;
}
