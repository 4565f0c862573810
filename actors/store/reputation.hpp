// What a node remembers about a peer across restarts (the `reputation` column family of the node store), and its
// stored layout.
//
// Layout v2: 37 bytes, little-endian.
//   offset  size  field
//        0     1  layout version (2)
//        1     8  successes             u64
//        9     8  failures              u64
//       17     8  latency_ewma_ms       f64 (IEEE-754 bits)
//       25     8  banned_until_ms       i64, milliseconds since the Unix epoch (0: not banned)
//       33     4  consecutive_failures  u32, failures since the last success (the ban's backoff exponent)
// Layout v1 (33 bytes: v2 without consecutive_failures) still decodes, with consecutive_failures 0. A value of
// another size or version decodes as absent (the entry is then ignored, as if never written).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace corolla {

struct PeerReputation {
  uint64_t successes = 0;
  uint64_t failures = 0;
  double latency_ewma_ms = 0;
  int64_t banned_until_ms = 0;
  uint32_t consecutive_failures = 0;

  bool operator==(const PeerReputation&) const = default;
};

inline constexpr uint8_t kReputationLayoutVersion = 2;
inline constexpr size_t kReputationRecordSize = 37;

std::string encode_reputation(const PeerReputation& r);
std::optional<PeerReputation> decode_reputation(std::string_view bytes);

}  // namespace corolla
