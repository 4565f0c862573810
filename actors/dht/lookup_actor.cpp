#include "actors/dht/lookup_actor.hpp"

#include <caf/all.hpp>
#include <limits>

#include "actors/dht/dht_internal.hpp"
#include "actors/dht/rpc.hpp"
#include "actors/dht/signed_record.hpp"

namespace corolla {
namespace {

struct lookup_state {
  lookup_params p;
  dht_node_parts node;
  caf::actor connector;
  std::optional<Lookup> lookup;
  lookup_result result;
  std::vector<caf::typed_response_promise<lookup_result>> waiting;
  bool done = false;
  static inline const char* name = "dht_lookup";
};

using lookup_actor = dht_lookup_actor::stateful_base<lookup_state>;

void finish(lookup_actor* self) {
  auto& st = self->state;
  if (st.done) return;
  st.done = true;
  st.result.closest = st.lookup->closest_answered(st.p.rules.k);
  st.result.answered = st.lookup->closest_answered(std::numeric_limits<size_t>::max());
  st.result.hops = st.lookup->hops();
  st.result.queries = st.lookup->queries();
  for (size_t i = 0; i + 1 < st.waiting.size(); ++i) st.waiting[i].deliver(st.result);
  if (!st.waiting.empty()) st.waiting.back().deliver(std::move(st.result));  // the actor quits: nothing reads it again
  st.waiting.clear();
  self->quit();
}

// Takes the items' values (each holder's reply lists the key's whole dictionary: moved, not copied). Only records
// that check (signed by their subkey's owner, live) count, each living no longer than its signature says: a
// holder's forgery with a later expiration must not displace the owner's record. Replicas hold the same bytes,
// so a value already merged is not verified again.
void merge(const NodeId& key, DhtEntries& into, std::vector<dht_item>& items, DhtTime now, const wall_clock& wall) {
  for (auto& item : items) {
    if (item.ttl_ns <= 0 || item.ttl_ns > kMaxDhtTtlNs || item.value.size() > kMaxDhtValueBytes) continue;
    const DhtTime asked = now + std::chrono::nanoseconds(item.ttl_ns);
    auto it = into.find(item.subkey);
    if (it != into.end() && it->second.value == item.value) continue;  // the same record: its expiry is signed
    const auto expiration = record_expiration(key, item.subkey, item.value, asked, now, nullptr, wall);
    if (!expiration) continue;
    if (it == into.end())
      into.emplace(std::move(item.subkey), DhtValue{std::move(item.value), *expiration});
    else if (*expiration > it->second.expiration)
      it->second = DhtValue{std::move(item.value), *expiration};
  }
}

// Named contacts with well-formed ids; others are ignored.
std::vector<Contact> usable(const std::vector<dht_contact>& cs) {
  std::vector<Contact> out;
  out.reserve(cs.size());
  for (const auto& c : cs)
    if (auto contact = from_wire(c); contact && !contact->address.empty()) out.push_back(std::move(*contact));
  return out;
}

void pump(lookup_actor* self);

// How often queries in flight are looked at: one still unanswered at two ticks (one to two ticks old) is passed
// over (Lookup::mark_slow). A fifth of the RPC timeout: a second by default, well above a round trip between
// continents, and a lost message then delays a read by a second or two rather than the five of its timeout (the
// simulator's random worlds found readers missing a live server whose announcement and read had each waited out
// a lost message).
caf::timespan slow_tick(const lookup_params& p) { return p.rpc_timeout / 5; }

void on_failure(lookup_actor* self, const Contact& c) {
  self->state.lookup->failed(c.id);
  self->send(self->state.node, contact_failed{c.id, false});
  pump(self);
}

// The reply came from the node we asked (same id): it counts, and its contacts join the lookup.
bool on_answer(lookup_actor* self, const Contact& c, const dht_contact& responder,
               const std::vector<dht_contact>& contacts) {
  if (responder.id != id_bytes(c.id)) {  // someone else lives at that address now
    on_failure(self, c);
    return false;
  }
  self->state.lookup->answered(c.id, usable(contacts));
  return true;
}

void pump(lookup_actor* self) {
  auto& st = self->state;
  if (st.done) return;
  // A read stops once `replicas` nodes answered with entries and the `replicas` nearest known nodes all answered:
  // records are stored on the nearest, and holders that answered first but lie farther (copies a put left on a
  // set that a hurried read had converged on) would hide records the nearer ones hold. Sweeps of random worlds
  // found readers that missed a live server for good that way.
  if (st.lookup->finished() ||
      (st.p.find_value && st.result.holders >= st.p.replicas && st.lookup->nearest_answered(st.p.replicas))) {
    finish(self);
    return;
  }
  const auto sender = to_wire(st.p.self);
  for (const Contact& c : st.lookup->next()) {
    if (st.p.find_value) {
      dht_call<dht_find_value_reply>(
          self, st.connector, c.address, st.p.rpc_timeout, dht_find_value_request{sender, id_bytes(st.p.target), {}},
          [=](dht_find_value_reply& r) {
            if (self->state.done) return;
            if (on_answer(self, c, r.responder, r.contacts)) {
              if (!r.items.empty()) {
                merge(self->state.p.target, self->state.result.entries, r.items, self->clock().now(),
                      self->state.p.wall);
                ++self->state.result.holders;
              }
              pump(self);
            }
          },
          [=](const caf::error&) {
            if (!self->state.done) on_failure(self, c);
          });
    } else {
      dht_call<dht_find_node_reply>(
          self, st.connector, c.address, st.p.rpc_timeout, dht_find_node_request{sender, id_bytes(st.p.target), {}},
          [=](const dht_find_node_reply& r) {
            if (self->state.done) return;
            if (on_answer(self, c, r.responder, r.contacts)) pump(self);
          },
          [=](const caf::error&) {
            if (!self->state.done) on_failure(self, c);
          });
    }
  }
}

dht_lookup_actor::behavior_type lookup(lookup_actor* self, lookup_params p, dht_node_parts node, caf::actor connector) {
  auto& st = self->state;
  st.p = std::move(p);
  st.node = std::move(node);
  st.connector = std::move(connector);
  st.lookup.emplace(st.p.target, st.p.rules, st.p.self.id, st.p.initial);
  return {
      [=](lookup_atom) -> caf::result<lookup_result> {
        auto& s = self->state;
        if (s.done) return s.result;
        auto rp = self->make_response_promise<lookup_result>();
        s.waiting.push_back(rp);
        if (s.waiting.size() == 1) {
          self->delayed_send(self, s.p.deadline, deadline_atom::value);
          self->delayed_send(self, slow_tick(s.p), slow_tick_atom::value);
          pump(self);
        }
        return rp;
      },
      [=](deadline_atom) { finish(self); },
      [=](slow_tick_atom) {
        auto& s = self->state;
        if (s.done) return;
        if (s.lookup->mark_slow() > 0) pump(self);
        if (!s.done) self->delayed_send(self, slow_tick(s.p), slow_tick_atom::value);
      },
  };
}

}  // namespace

dht_lookup_actor spawn_lookup(caf::local_actor* owner, dht_node_parts node, lookup_params params,
                              caf::actor connector) {
  return owner->spawn<caf::linked>(lookup, std::move(params), std::move(node), std::move(connector));
}

}  // namespace corolla
