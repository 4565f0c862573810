#include "actors/dht/signed_record.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "actors/protocol/unix_clock.hpp"
#include "actors/protocol/wire_codec.hpp"
#include "schema/dht.capnp.h"

namespace corolla {
namespace {

constexpr std::string_view kSignedContext = "corolla dht record v1";
constexpr size_t kHexKey = 64;

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}

// What the owner signs: a context string, then each part with its length, so no two (key, subkey, payload,
// expiry) make the same bytes.
std::string signed_bytes(const NodeId& key_id, std::string_view subkey, std::string_view payload,
                         int64_t expires_unix_ms) {
  std::string m;
  m.reserve(kSignedContext.size() + 64 + key_id.size() + subkey.size() + payload.size());
  m.append(kSignedContext);
  put_u64(m, key_id.size());
  m.append(reinterpret_cast<const char*>(key_id.data()), key_id.size());
  put_u64(m, subkey.size());
  m.append(subkey);
  put_u64(m, payload.size());
  m.append(payload);
  put_u64(m, static_cast<uint64_t>(expires_unix_ms));
  return m;
}

}  // namespace

std::string owned_subkey(const PublicKey& owner, std::string_view name) {
  if (name.empty()) return to_hex(owner);
  return std::string(name) + "@" + to_hex(owner);
}

std::optional<PublicKey> subkey_owner(std::string_view subkey) {
  if (subkey.size() == kHexKey) return public_key_from_hex(subkey);
  if (subkey.size() > kHexKey && subkey[subkey.size() - kHexKey - 1] == '@')
    return public_key_from_hex(subkey.substr(subkey.size() - kHexKey));
  return std::nullopt;
}

std::string_view subkey_name(std::string_view subkey) {
  if (subkey.size() > kHexKey && subkey[subkey.size() - kHexKey - 1] == '@')
    return subkey.substr(0, subkey.size() - kHexKey - 1);
  return {};
}

namespace {

// What checking a record's signature found, without the clock: the problem (empty: the signature is good), and
// where the payload lies inside the record's bytes.
struct signature_verdict {
  std::string problem;
  size_t payload_offset = 0, payload_size = 0;
  int64_t expires_unix_ms = 0;
  PublicKey owner{};
};

// Records whose signature checked, by their exact bytes (key id, subkey, value): every reader of a key meets the
// same records again and again (each refresh, each replica, each node of a simulated swarm), and an Ed25519
// verification costs ~80 us where finding the bytes here costs a hash of the record's last bytes (its signature,
// which Cap'n Proto writes last) and one comparison, with nothing copied. Only the signature's verdict is kept:
// the expiry is checked against the clock at every call. Bounded: emptied when full.
class verified_records {
 public:
  static verified_records& get() {
    static verified_records v;
    return v;
  }
  static size_t hash_of(const NodeId& key_id, std::string_view subkey, std::string_view value) {
    const std::string_view tail = value.substr(value.size() - std::min<size_t>(value.size(), 64));
    size_t h = std::hash<std::string_view>{}(tail) ^ (value.size() * 0x9e3779b97f4a7c15ull);
    h ^= std::hash<std::string_view>{}(subkey) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    size_t k = 0;
    std::memcpy(&k, key_id.data(), std::min(sizeof k, key_id.size()));
    return h ^ (k + (h << 6) + (h >> 2));
  }
  std::optional<signature_verdict> find(size_t hash, const NodeId& key_id, std::string_view subkey,
                                        std::string_view value) {
    std::lock_guard lock(mutex_);
    auto [first, last] = records_.equal_range(hash);
    for (auto it = first; it != last; ++it)
      if (it->second.value == value && it->second.subkey == subkey && it->second.key_id == key_id)
        return it->second.verdict;
    return std::nullopt;
  }
  void add(size_t hash, const NodeId& key_id, std::string_view subkey, std::string_view value,
           const signature_verdict& v) {
    std::lock_guard lock(mutex_);
    if (records_.size() >= kCheckedRecordsKept) records_.clear();
    records_.emplace(hash, entry{key_id, std::string(subkey), std::string(value), v});
  }

 private:
  struct entry {
    NodeId key_id;
    std::string subkey, value;
    signature_verdict verdict;
  };
  std::mutex mutex_;
  std::unordered_multimap<size_t, entry> records_;
};

signature_verdict check_signed(const NodeId& key_id, std::string_view subkey, std::string_view value);

}  // namespace

checked_record check_record(const NodeId& key_id, std::string_view subkey, std::string_view value,
                            int64_t now_unix_ms) {
  checked_record out = check_record_signature(key_id, subkey, value);
  if (out.problem.empty()) {
    if (out.expires_unix_ms <= now_unix_ms)
      out.problem = "it has expired";
    else if (out.expires_unix_ms - now_unix_ms > kMaxRecordAheadMs)
      out.problem = "it expires too far ahead";
    if (!out.problem.empty()) out.payload = {};
  }
  return out;
}

checked_record check_record_signature(const NodeId& key_id, std::string_view subkey, std::string_view value) {
  auto& cache = verified_records::get();
  const size_t hash = verified_records::hash_of(key_id, subkey, value);
  std::optional<signature_verdict> known = cache.find(hash, key_id, subkey, value);
  if (!known) {
    known = check_signed(key_id, subkey, value);
    if (known->problem.empty()) cache.add(hash, key_id, subkey, value, *known);
  }
  checked_record out;
  out.problem = std::move(known->problem);
  out.expires_unix_ms = known->expires_unix_ms;
  out.owner = known->owner;
  if (out.problem.empty()) out.payload = value.substr(known->payload_offset, known->payload_size);
  return out;
}

namespace {

// A record's parts, read in place (the value copied once into aligned words; its layout is the value's, so the
// payload's offset in it is its offset in the value). `problem` is set when it is not a SignedRecord. The owner is
// not among them: the subkey names it.
struct record_parts {
  signature_verdict verdict;  // problem, payload position, expiry
  std::string_view payload;   // inside `bytes`
  Signature signature{};
  std::shared_ptr<std::vector<char>> bytes;
};

record_parts parse_record(std::string_view value) {
  record_parts out;
  auto& v = out.verdict;
  // Cap'n Proto reads whole, aligned words: the value is copied into such a buffer (values are at most 64 KiB).
  out.bytes = std::make_shared<std::vector<char>>(value.begin(), value.end());
  bool shaped = false;
  wire_codec::parse<wire::SignedRecord>(out.bytes, v.problem, [&](wire::SignedRecord::Reader r, auto&) {
    const auto p = r.getPayload(), signature = r.getSignature();
    if (signature.size() != out.signature.size()) return;
    out.payload = std::string_view(reinterpret_cast<const char*>(p.begin()), p.size());
    v.payload_offset = out.payload.empty() ? 0 : static_cast<size_t>(out.payload.data() - out.bytes->data());
    v.payload_size = out.payload.size();
    v.expires_unix_ms = r.getExpiresUnixMs();
    std::memcpy(out.signature.data(), signature.begin(), out.signature.size());
    shaped = true;
  });
  if (v.problem.empty() && !shaped) v.problem = "it is not a signed record";
  return out;
}

// Everything but the clock: the shape, the owner the subkey names, the signature.
signature_verdict check_signed(const NodeId& key_id, std::string_view subkey, std::string_view value) {
  const auto named = subkey_owner(subkey);
  if (!named) {
    signature_verdict out;
    out.problem = "its subkey names no owner";
    return out;
  }
  record_parts parts = parse_record(value);
  signature_verdict& out = parts.verdict;
  if (!out.problem.empty()) return out;
  out.owner = *named;
  if (!verify_signature(out.owner, signed_bytes(key_id, subkey, parts.payload, out.expires_unix_ms), parts.signature))
    out.problem = "its signature does not verify";
  return out;
}

}  // namespace

std::string sign_record(const SigningKey& key, const NodeId& key_id, std::string_view subkey, std::string_view payload,
                        int64_t expires_unix_ms) {
  const auto owner = subkey_owner(subkey);
  if (!owner || *owner != key.public_key())
    throw std::invalid_argument("the subkey '" + std::string(subkey) + "' does not name the signing key");
  const Signature sig = key.sign(signed_bytes(key_id, subkey, payload, expires_unix_ms));
  capnp::MallocMessageBuilder mb;
  auto r = mb.initRoot<wire::SignedRecord>();
  r.setPayload(kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
  r.setExpiresUnixMs(expires_unix_ms);
  r.setSignature(kj::arrayPtr(sig.data(), sig.size()));
  const std::vector<char> bytes = wire_codec::flatten(mb);
  std::string value(bytes.begin(), bytes.end());
  // This process made the signature: its verdict is known without verifying it. Nodes sharing the process (a
  // server's own DHT node, every node of a simulated swarm) then never verify it; other processes do.
  record_parts parts = parse_record(value);
  parts.verdict.owner = *owner;
  if (parts.verdict.problem.empty())
    verified_records::get().add(verified_records::hash_of(key_id, subkey, value), key_id, subkey, value, parts.verdict);
  return value;
}

std::optional<DhtTime> record_expiration(const NodeId& key_id, std::string_view subkey, std::string_view value,
                                         DhtTime requested, DhtTime now, std::string* problem, const wall_clock& wall) {
  checked_record r = check_record(key_id, subkey, value, wall.unix_ms_at(now));
  if (!r.problem.empty()) {
    if (problem) *problem = std::move(r.problem);
    return std::nullopt;
  }
  return std::min(requested, wall.time_at_unix_ms(r.expires_unix_ms));
}

}  // namespace corolla
