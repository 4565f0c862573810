#include "actors/store/reputation.hpp"

#include "actors/store/byte_order.hpp"

namespace corolla {

std::string encode_reputation(const PeerReputation& r) {
  std::string out;
  out.reserve(kReputationRecordSize);
  store::put_le<uint8_t>(out, kReputationLayoutVersion);
  store::put_le(out, r.successes);
  store::put_le(out, r.failures);
  store::put_le_double(out, r.latency_ewma_ms);
  store::put_le(out, r.banned_until_ms);
  store::put_le(out, r.consecutive_failures);
  return out;
}

std::optional<PeerReputation> decode_reputation(std::string_view bytes) {
  constexpr size_t kV1Size = 33;
  const bool v1 = bytes.size() == kV1Size && static_cast<uint8_t>(bytes[0]) == 1;
  const bool v2 = bytes.size() == kReputationRecordSize && static_cast<uint8_t>(bytes[0]) == kReputationLayoutVersion;
  if (!v1 && !v2) return std::nullopt;
  const char* p = bytes.data() + 1;
  PeerReputation r;
  r.successes = store::get_le<uint64_t>(p);
  r.failures = store::get_le<uint64_t>(p + 8);
  r.latency_ewma_ms = store::get_le_double(p + 16);
  r.banned_until_ms = store::get_le<int64_t>(p + 24);
  if (v2) r.consecutive_failures = store::get_le<uint32_t>(p + 32);
  return r;
}

}  // namespace corolla
