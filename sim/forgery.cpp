#include "sim/forgery.hpp"

#include <capnp/message.h>
#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "actors/dht/signed_record.hpp"
#include "actors/protocol/messages.hpp"
#include "actors/protocol/unix_clock.hpp"
#include "actors/protocol/wire_codec.hpp"
#include "schema/dht.capnp.h"

namespace corolla::sim {
namespace {

constexpr int64_t kLaterMs = 10 * 60 * 1000;

// A SignedRecord of `payload` and `expires_unix_ms` carrying `signature` as it is (not a signature of them).
std::string record_with(std::string_view payload, int64_t expires_unix_ms, kj::ArrayPtr<const kj::byte> signature) {
  capnp::MallocMessageBuilder mb;
  auto r = mb.initRoot<wire::SignedRecord>();
  r.setPayload(kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
  r.setExpiresUnixMs(expires_unix_ms);
  r.setSignature(signature);
  const std::vector<char> bytes = wire_codec::flatten(mb);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

std::vector<dht_item> forge_server_records(const SigningKey& forger, const NodeId& key_id, const dht_item& genuine,
                                           int64_t now_unix_ms) {
  const checked_record r = check_record(key_id, genuine.subkey, genuine.value, now_unix_ms);
  if (!r.problem.empty() || r.owner == forger.public_key() || !subkey_name(genuine.subkey).empty()) return {};
  server_info info;
  decode(std::make_shared<std::vector<char>>(r.payload.begin(), r.payload.end()), info);
  if (!info.wire_error.empty()) return {};
  info.first_block = 0;
  info.last_block = info.total_blocks;
  const std::vector<char> widened_bytes = encode(info);
  const std::string widened(widened_bytes.begin(), widened_bytes.end());
  const int64_t expires = r.expires_unix_ms + kLaterMs;
  const int64_t ttl = std::min<int64_t>(genuine.ttl_ns + kLaterMs * 1000000, kMaxDhtTtlNs);

  std::vector<dht_item> out;
  std::string problem;  // the genuine record's signature, kept over the tampered payload and expiry
  wire_codec::parse<wire::SignedRecord>(
      std::make_shared<std::vector<char>>(genuine.value.begin(), genuine.value.end()), problem,
      [&](wire::SignedRecord::Reader g, auto&) {
        out.push_back({genuine.subkey, record_with(widened, expires, g.getSignature()), ttl});
      });
  // Signed by the forger, over its own subkey (sign_record signs nothing else), put under the owner's.
  out.push_back(
      {genuine.subkey, sign_record(forger, key_id, owned_subkey(forger.public_key()), widened, expires), ttl});
  return out;
}

dht_rpc_actor spawn_forging_dht(caf::actor_system& sys, dht_rpc_actor real, std::shared_ptr<const SigningKey> forger) {
  return sys.spawn([real, forger](dht_rpc_actor::pointer self) -> dht_rpc_actor::behavior_type {
    return {
        [=](dht_ping_request& req) { return self->delegate(real, std::move(req)); },
        [=](dht_find_node_request& req) { return self->delegate(real, std::move(req)); },
        [=](dht_store_request& req) { return self->delegate(real, std::move(req)); },
        [=](dht_find_value_request& req) -> caf::result<dht_find_value_reply> {
          auto rp = self->make_response_promise<dht_find_value_reply>();
          const auto key = id_from_bytes(req.key);
          self->request(real, std::chrono::seconds(30), std::move(req))
              .then(
                  [=](dht_find_value_reply& reply) mutable {
                    if (key) {
                      const int64_t now = unix_ms(self);
                      const size_t genuine = reply.items.size();
                      for (size_t i = 0; i < genuine; ++i)
                        for (auto& f : forge_server_records(*forger, *key, reply.items[i], now))
                          reply.items.push_back(std::move(f));
                    }
                    rp.deliver(std::move(reply));
                  },
                  [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
    };
  });
}

}  // namespace corolla::sim
