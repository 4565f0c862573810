#include <caf/binary_deserializer.hpp>
#include <caf/sec.hpp>
#include <algorithm>

#include "actors/protocol/wire_message.hpp"

namespace corolla {
namespace {

// Sources that cannot say how much is left grow the vector by this much at a time, so what it holds never runs
// more than this ahead of what arrived.
constexpr size_t kGrowthStep = size_t{1} << 20;

caf::error read_known_length(caf::binary_deserializer& source, size_t n, std::vector<char>& bytes) {
  if (n > source.remaining()) return caf::make_error(caf::sec::end_of_stream);
  bytes.resize(n);
  return n > 0 ? source.apply_raw(n, bytes.data()) : caf::error{};
}

caf::error read_in_steps(caf::deserializer& source, size_t n, std::vector<char>& bytes) {
  bytes.clear();
  while (bytes.size() < n) {
    const size_t at = bytes.size(), step = std::min(kGrowthStep, n - at);
    bytes.resize(at + step);
    if (auto err = source.apply_raw(step, bytes.data() + at)) return err;
  }
  return {};
}

}  // namespace

caf::error read_wire_bytes(caf::deserializer& source, std::vector<char>& bytes) {
  size_t n = 0;
  if (auto err = source.begin_sequence(n)) return err;
  auto* binary = dynamic_cast<caf::binary_deserializer*>(&source);
  if (auto err = binary ? read_known_length(*binary, n, bytes) : read_in_steps(source, n, bytes)) return err;
  return source.end_sequence();
}

}  // namespace corolla
