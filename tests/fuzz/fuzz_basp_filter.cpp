// The peer gateway's BASP filter (actors/net/basp_filter.hpp) on a stream of frames from a peer. The first byte
// picks the side (bit 0: this node connected to the peer) and which node ids count as connected (bit 1: the
// peer's own id is already claimed); the rest is what the peer sends. Besides not crashing, the filter must keep
// its promises: no frame over the cap passes, and only a message may pass on a prefix.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

#include "actors/net/basp_filter.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

namespace {

basp_node_id node(uint8_t pid_low, uint8_t host) {
  basp_node_id id{};
  const auto impl = BaspFilter::default_node_impl();
  std::memcpy(id.data(), impl.data(), impl.size());
  id[11] = pid_low;
  for (size_t i = 12; i < id.size(); ++i) id[i] = host;
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::set<basp_node_id> connected;
  if (mode & 2) connected.insert(node(2, 0x22));
  basp_filter_limits limits;
  BaspFilter f((mode & 1) ? basp_side::connected : basp_side::accepted, node(1, 0x11), limits,
               [&](const basp_node_id& n) { return connected.count(n) > 0; },
               [&](const basp_node_id& n) { return connected.insert(n).second; });
  const uint8_t* p = data + 1;
  size_t n = size - 1;
  while (n >= kBaspHeaderSize) {
    const uint8_t op = p[0];
    const auto h = f.on_header(p);
    p += kBaspHeaderSize;
    n -= kBaspHeaderSize;
    if (h.verdict.kind == basp_verdict::close) break;
    require(h.payload_bytes <= limits.max_frame_bytes);
    require(h.judge_bytes <= h.payload_bytes);
    if (h.payload_bytes == 0) continue;
    if (h.judge_bytes > n) break;
    const auto v = f.on_payload(p, h.judge_bytes);
    if (v.kind == basp_verdict::pass && h.judge_bytes < h.payload_bytes) require(op == 2 || op == 3);
    if (v.kind == basp_verdict::pass && (op == 0 || op == 1)) require(h.payload_bytes <= limits.max_handshake_bytes);
    if (v.kind == basp_verdict::close) break;
    const size_t skip = h.payload_bytes;
    if (skip > n) break;
    p += skip;
    n -= skip;
  }
  return 0;
}
