// What a client makes of a DHT key's entries (actors/dht/announcer.hpp, signed_record.hpp): any subkeys and
// values, as a hostile DHT node may return them. The first byte picks how the input becomes entries (modulo 3):
//   0: split at 0xFF bytes into entries, each a subkey and a value separated by the first 0xFE byte;
//   1: one server's info built from the input (span, rates as raw doubles, state, pings), encoded as a server
//      encodes it, bytes of the encoding overwritten as the rest of the input says, then signed: a stranger's
//      own record, saying anything;
//   2: the same info signed first, then bytes of the signed record overwritten: a forgery.
// A server read back must be signed by the owner its subkey names (which it carries as `owner`), with a span
// inside the model it claims and finite rates; the rest are left out with a reason.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "actors/dht/announcer.hpp"
#include "actors/dht/signed_record.hpp"
#include "actors/dht/storage.hpp"
#include "actors/protocol/unix_clock.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

namespace {

const std::string kKey = "m.0-31";
const DhtTime kNow = DhtTime{} + std::chrono::hours(10);

const SigningKey& stranger() {
  static const SigningKey key = SigningKey::from_seed(KeySeed{7, 7, 7});
  return key;
}

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
      entries[entry.substr(0, sep)] = DhtValue{entry.substr(sep + 1), kNow + std::chrono::hours(1)};
    start = end + 1;
  }
  return entries;
}

DhtEntries built_entry(input in, bool forge) {
  server_info i;
  i.address = "127.0.0.1:1";
  i.first_block = static_cast<int64_t>(in.take(8));
  i.last_block = static_cast<int64_t>(in.take(8));
  i.total_blocks = static_cast<int64_t>(in.take(8));
  i.throughput = in.real();
  i.inference_rps = in.real();
  static const char* states[] = {"online", "joining", "offline", "ruling"};
  i.state = states[in.take(1) % 4];
  for (uint64_t k = 0, pings = in.take(1) % 4; k < pings; ++k)
    i.pings.emplace_back("x:" + std::to_string(k), in.real());
  const auto encoded = encode(i);
  std::string bytes(encoded.begin(), encoded.end());
  const std::string subkey = owned_subkey(stranger().public_key());
  const int64_t expires = unix_ms_at(kNow + std::chrono::minutes(30));
  if (forge) bytes = sign_record(stranger(), key_id(kKey), subkey, bytes, expires);
  while (in.n >= 3 && !bytes.empty()) {
    const size_t at = in.take(2) % bytes.size();
    bytes[at] = static_cast<char>(in.take(1));
  }
  if (!forge) bytes = sign_record(stranger(), key_id(kKey), subkey, bytes, expires);
  return {{subkey, DhtValue{bytes, kNow + std::chrono::minutes(30)}}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  const DhtEntries entries = mode == 0 ? split_entries(std::string(reinterpret_cast<const char*>(data + 1), size - 1))
                                       : built_entry(input{{data + 1, size - 1}}, mode == 2);
  std::vector<std::string> problems;
  for (const auto& s : parse_servers(kKey, entries, kNow, &problems)) {
    require(entries.count(s.info.owner) == 1);  // a bare owner subkey, the key that signed
    require(0 <= s.info.first_block && s.info.first_block < s.info.last_block &&
            s.info.last_block <= s.info.total_blocks && s.info.total_blocks <= kMaxAnnouncedBlocks);
    require(std::isfinite(s.info.throughput) && s.info.throughput >= 0);
    for (const auto& [address, ms] : s.info.pings) require(std::isfinite(ms) && ms >= 0);
  }
  return 0;
}
