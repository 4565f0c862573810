// What a client makes of a DHT key's entries (actors/dht/announcer.hpp): any subkeys and values, as strangers may
// write them while records are not signed. The first byte picks how the input becomes entries:
//   even: split at 0xFF bytes into entries, each a subkey and a value separated by the first 0xFE byte;
//   odd:  one server's info built from the input (span, rates as raw doubles, state, pings), encoded as a server
//         encodes it, then bytes of the encoding overwritten as the rest of the input says.
// A server read back must have a span inside the model it claims, finite rates and an address equal to its
// subkey; the rest are left out with a reason.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "actors/dht/announcer.hpp"
#include "actors/dht/storage.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

namespace {


struct input : fuzz::input {
  double real() {
    const uint64_t bits = take(8);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
};

DhtEntries split_entries(const std::string& text) {
  DhtEntries entries;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\xff', start);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(start, end - start);
    const size_t sep = entry.find('\xfe');
    if (sep != std::string::npos)
      entries[entry.substr(0, sep)] = DhtValue{entry.substr(sep + 1), DhtTime{} + std::chrono::hours(1)};
    start = end + 1;
  }
  return entries;
}

DhtEntries built_entry(input in) {
  server_info i;
  i.address = "127.0.0.1:1";
  i.first_block = static_cast<int64_t>(in.take(8));
  i.last_block = static_cast<int64_t>(in.take(8));
  i.total_blocks = static_cast<int64_t>(in.take(8));
  i.throughput = in.real();
  i.inference_rps = in.real();
  static const char* states[] = {"online", "joining", "offline", "ruling"};
  i.state = states[in.take(1) % 4];
  for (uint64_t k = 0, pings = in.take(1) % 4; k < pings; ++k) i.pings.emplace_back("x:" + std::to_string(k), in.real());
  auto bytes = encode(i);
  while (in.n >= 3 && !bytes.empty()) {
    const size_t at = in.take(2) % bytes.size();
    bytes[at] = static_cast<char>(in.take(1));
  }
  return {{i.address, DhtValue{std::string(bytes.begin(), bytes.end()), DhtTime{} + std::chrono::hours(1)}}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const DhtEntries entries = (data[0] & 1) ? built_entry(input{{data + 1, size - 1}})
                                           : split_entries(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  std::vector<std::string> problems;
  for (const auto& s : parse_servers(entries, &problems)) {
    require(entries.count(s.info.address) == 1);
    require(0 <= s.info.first_block && s.info.first_block < s.info.last_block &&
            s.info.last_block <= s.info.total_blocks && s.info.total_blocks <= kMaxAnnouncedBlocks);
    require(std::isfinite(s.info.throughput) && s.info.throughput >= 0);
    for (const auto& [address, ms] : s.info.pings) require(std::isfinite(ms) && ms >= 0);
  }
  return 0;
}
