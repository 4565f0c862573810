#include "actors/dht/bucket_actor.hpp"

#include <caf/all.hpp>

#include "actors/dht/dht_internal.hpp"
#include "actors/dht/rpc.hpp"

namespace corolla {
namespace {

struct bucket_state {
  bucket_params p;
  dht_node_parts node;
  caf::actor connector;
  KBucket bucket;
  caf::actor_clock::time_point last_ping{};
  bool pinging = false;
  static inline const char* name = "dht_bucket";
};

using bucket_actor = dht_bucket_actor::stateful_base<bucket_state>;

void publish(bucket_actor* self) {
  self->send(self->state.node, bucket_view{self->state.p.index, self->state.bucket.contacts()});
}

// A full bucket pings its least recently seen contact at most this often. In a big swarm the far buckets are always
// full and meet newcomers all the time; they wait in the replacement cache (the freshest kept) until the next
// ping, instead of each costing one.
constexpr caf::timespan kMinPingInterval = std::chrono::seconds(30);

// The bucket is full and a newcomer waits: is the least recently seen contact still alive?
void ping_least_recent(bucket_actor* self) {
  auto& st = self->state;
  const Contact* lrs = st.bucket.least_recent();
  if (st.pinging || !lrs || st.bucket.replacements().empty()) return;
  const auto now = self->clock().now();
  if (st.last_ping != caf::actor_clock::time_point{} && now - st.last_ping < kMinPingInterval) return;
  st.last_ping = now;
  st.pinging = true;
  const Contact old = *lrs;
  dht_call<dht_ping_reply>(
      self, st.connector, old.address, st.p.rpc_timeout, dht_ping_request{to_wire(st.p.self), {}},
      [=](const dht_ping_reply& r) {
        auto& s = self->state;
        s.pinging = false;
        if (r.responder.id == id_bytes(old.id)) {
          s.bucket.seen(old);                        // alive: it stays, the newcomer keeps waiting
        } else if (s.bucket.failed(old.id, true)) {  // another node answers at that address now
          publish(self);
        }
      },
      [=](const caf::error&) {
        self->state.pinging = false;
        if (self->state.bucket.failed(old.id, true)) publish(self);
      });
}

dht_bucket_actor::behavior_type bucket(bucket_actor* self, bucket_params p, dht_node_parts node, caf::actor connector) {
  auto& st = self->state;
  st.p = std::move(p);
  st.node = std::move(node);
  st.connector = std::move(connector);
  st.bucket = KBucket(st.p.rules);
  return {
      [=](const contact_seen& m) {
        auto& s = self->state;
        switch (s.bucket.seen(m.contact)) {
          case KBucket::Seen::added: publish(self); break;
          case KBucket::Seen::updated: break;
          case KBucket::Seen::replacement: ping_least_recent(self); break;
        }
      },
      [=](const contact_failed& m) {
        if (self->state.bucket.failed(m.id, m.stale)) publish(self);
      },
      [=](address_atom, const std::string& address) { self->state.p.self.address = address; },
  };
}

}  // namespace

dht_bucket_actor spawn_bucket(caf::local_actor* owner, dht_node_parts node, bucket_params params,
                              caf::actor connector) {
  return owner->spawn<caf::linked>(bucket, std::move(params), std::move(node), std::move(connector));
}

}  // namespace corolla
