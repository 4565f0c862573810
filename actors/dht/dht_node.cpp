#include "actors/dht/dht_node.hpp"

#include <caf/all.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "actors/dht/bucket_actor.hpp"
#include "actors/dht/dht_internal.hpp"
#include "actors/dht/lookup_actor.hpp"
#include "actors/dht/rpc.hpp"
#include "actors/dht/signed_record.hpp"
#include "actors/log/node_log.hpp"
#include "actors/net/peer_origin.hpp"
#include "actors/protocol/own_node.hpp"

namespace corolla {
namespace {

static_assert(std::is_same_v<caf::actor_clock::time_point, DhtTime>, "DHT times are actor clock times");

// The node's whole interface: its API and the RPCs of other nodes, what its buckets and lookups report, and its
// timers (obeyed only from its own node).
using dht_node_internal =
    dht_node_actor::extend_with<dht_node_parts>::extend<caf::reacts_to<sweep_atom>, caf::reacts_to<republish_atom>>;

struct dht_node_state {
  dht_options opt;
  Contact me;  // id and advertised address (empty in client mode)
  caf::actor connector;
  std::map<int, dht_bucket_actor> buckets;    // bucket index -> bucket actor (spawned when first needed)
  std::map<int, std::vector<Contact>> views;  // bucket index -> its members, as the bucket last reported
  DhtStorage storage;
  std::mt19937_64 rng;
  std::set<dht_lookup_actor> lookups;  // running
  // When each contact was last reported to its bucket: a contact met again within kSeenReportInterval (a member
  // of the bucket: kMemberReportInterval) is not reported again (every RPC meets one, and the bucket's order by
  // last sighting does not need that precision).
  std::unordered_map<NodeId, DhtTime, id_hash> reported;
  // When a full bucket was last told of a newcomer (kNewcomerReportInterval).
  std::map<int, DhtTime> newcomer_reported;
  // When a contact of each bucket's range was last met (reported or not): a bucket none of whose range was met
  // for a refresh period is refreshed (checked at each sweep).
  std::map<int, DhtTime> last_met;
  // The nodes nearest to a key, as a read's lookup just converged on them: a put of that key soon after stores
  // there without a lookup of its own (kReadReuse).
  struct converged {
    DhtTime at{};
    std::vector<Contact> closest;
  };
  std::map<NodeId, converged, id_less> recent_reads;
  // Contacts that left their buckets (failed RPCs in a row), to try again (kLostRetry). A node cut off for a while
  // (frozen, or its network partitioned) evicts every contact it tried and is evicted by every node that tried it;
  // once the cut heals, neither side would meet the other again, and the DHT would stay split for good.
  struct lost_contact {
    Contact contact;
    DhtTime lost{}, tried{};
  };
  std::map<NodeId, lost_contact, id_less> lost;
  std::vector<std::string> initial_peers;  // of the last bootstrap: pinged again while they are not contacts
  static inline const char* name = "dht_node";
};

constexpr caf::timespan kSeenReportInterval = std::chrono::seconds(30);
// A member of its bucket is news only for the bucket's order by last sighting, which decides whom a full bucket
// pings first for a waiting newcomer (and a live one pinged moves to the end anyway); a newcomer to a full bucket
// only waits in its replacement cache, which the bucket draws on when a member fails, and the bucket pings for it
// at most once per 30 s. Reported at every sighting, these were most of a simulated swarm's bucket events
// (docs/PERFORMANCE.md, "Simulator").
constexpr caf::timespan kMemberReportInterval = std::chrono::minutes(5);
constexpr caf::timespan kNewcomerReportInterval = std::chrono::seconds(30);

// Lost contacts: each sweep pings the few tried least recently; one that answers is a contact again, one lost
// longer than kLostMemory is forgotten, and at most kLostKept are remembered (the most recently lost).
constexpr size_t kLostPingsPerSweep = 5;
constexpr caf::timespan kLostMemory = std::chrono::hours(1);
constexpr size_t kLostKept = 64;

// How long a read's converged set stands in for a put's lookup. A server reads the key it announces under (its
// next block's servers, to ping them) seconds before it announces: a put's lookup then would walk the same path
// again to the nodes the read just met (about 6 queries, a sixth of a server's DHT messages). The read walked
// to the key's holders (it stops once 5 answered with entries), and every node it keeps answered; a node that
// joined nearer to the key within these seconds is missed as it would be by a put made that much earlier, and
// readers, stopping at 5 holders too, meet these nodes.
constexpr caf::timespan kReadReuse = std::chrono::seconds(10);

using node_actor = dht_node_internal::stateful_base<dht_node_state>;

// An entry to store, with its absolute expiration.
using Entry = std::pair<std::string, DhtValue>;

int64_t ttl_ns(DhtTime expiration, DhtTime now) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(expiration - now).count();
}

std::vector<dht_item> to_items(const std::vector<Entry>& entries, DhtTime now) {
  std::vector<dht_item> out;
  out.reserve(entries.size());
  for (const auto& [subkey, v] : entries) out.push_back({subkey, v.value, ttl_ns(v.expiration, now)});
  return out;
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// --- routing table ----------------------------------------------------------------------------------------------

void note_seen(node_actor* self, const Contact& c) {
  auto& st = self->state;
  if (c.address.empty() || c.id == st.me.id) return;
  const auto now = self->clock().now();
  const int index = bucket_index(st.me.id, c.id);
  st.last_met[index] = now;
  const auto view = st.views.find(index);
  const bool member = view != st.views.end() && std::any_of(view->second.begin(), view->second.end(),
                                                            [&](const Contact& m) { return m.id == c.id; });
  const bool full = view != st.views.end() && view->second.size() >= st.opt.k;
  auto told = st.reported.find(c.id);
  if (told != st.reported.end() && now - told->second < (member ? kMemberReportInterval : kSeenReportInterval)) return;
  if (!member && full) {
    auto [last, first_time] = st.newcomer_reported.try_emplace(index, now);
    if (!first_time) {
      if (now - last->second < kNewcomerReportInterval) return;
      last->second = now;
    }
  }
  if (told != st.reported.end())
    told->second = now;
  else
    st.reported.emplace(c.id, now);
  auto& bucket = st.buckets[index];
  if (!bucket) {
    bucket_params p{index, st.me, KBucket::Options{st.opt.k, st.opt.max_failures, st.opt.k}, st.opt.rpc_timeout};
    bucket = spawn_bucket(self, dht_node_parts{self}, std::move(p), st.connector);
  }
  self->send(bucket, contact_seen{c});
}

void note_failed(node_actor* self, const NodeId& id) {
  auto& st = self->state;
  st.reported.erase(id);  // met again, it is news to its bucket
  if (auto it = st.buckets.find(bucket_index(st.me.id, id)); it != st.buckets.end())
    self->send(it->second, contact_failed{id, false});
}

size_t contact_count(const dht_node_state& st) {
  size_t n = 0;
  for (const auto& [i, v] : st.views) n += v.size();
  return n;
}

// A bucket's members before and after its report: those gone are remembered as lost, those present are not.
void note_departures(node_actor* self, const std::vector<Contact>& before, const std::vector<Contact>& after) {
  auto& st = self->state;
  const auto now = self->clock().now();
  for (const auto& c : after) st.lost.erase(c.id);
  for (const auto& c : before)
    if (std::none_of(after.begin(), after.end(), [&](const Contact& a) { return a.id == c.id; }))
      st.lost[c.id] = {c, now, now};
  while (st.lost.size() > kLostKept) {
    auto oldest = std::min_element(st.lost.begin(), st.lost.end(),
                                   [](const auto& a, const auto& b) { return a.second.lost < b.second.lost; });
    st.lost.erase(oldest);
  }
}

void ping_address(node_actor* self, const std::string& address) {
  dht_call<dht_ping_reply>(
      self, self->state.connector, address, self->state.opt.rpc_timeout, dht_ping_request{to_wire(self->state.me), {}},
      [=](const dht_ping_reply& r) {
        if (auto c = from_wire(r.responder); c && c->id != self->state.me.id) note_seen(self, Contact{c->id, address});
      },
      [](const caf::error&) {});
}

// At each sweep: pings a few lost contacts (a cut that healed joins the two sides again: each side's pings meet
// the other, and a pinged node notes the pinger too), and the initial peers that are not contacts now. The
// initial peers are the swarm's meeting point: a node that joined while they were unreachable, and formed a
// group with others who joined then, would otherwise never meet the nodes that knew only them.
void meet_again(node_actor* self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  std::erase_if(st.lost, [&](const auto& e) { return now - e.second.lost > kLostMemory; });
  std::vector<dht_node_state::lost_contact*> order;
  for (auto& [id, l] : st.lost) order.push_back(&l);
  std::sort(order.begin(), order.end(), [](auto a, auto b) { return a->tried < b->tried; });
  for (size_t i = 0; i < order.size() && i < kLostPingsPerSweep; ++i) {
    order[i]->tried = now;
    ping_address(self, order[i]->contact.address);
  }
  for (const auto& peer : st.initial_peers) {
    bool known = peer == st.me.address;
    for (const auto& [i, v] : st.views)
      known = known || std::any_of(v.begin(), v.end(), [&](const Contact& c) { return c.address == peer; });
    if (!known) ping_address(self, peer);
  }
}

// The n known contacts closest to target (and `extra` ones), without `exclude`; of two with the same id, the one
// met first (the routing table before `extra`). Every find_node/find_value a node answers runs this, so it ranks
// pointers with their distances, copies only the n it returns, and reads no more buckets than it needs: with J
// the bucket the target falls in, bucket J's contacts are closer to the target than any other (their distance is
// below 2^J), then come the buckets below J together (distances in [2^J, 2^(J+1))), then J+1, J+2, ... one by one
// (bucket i > J: [2^i, 2^(i+1))). A full bucket J, the common case, is all that gets sorted.
std::vector<const Contact*> closest(const dht_node_state& st, const NodeId& target, size_t n,
                                    const std::vector<Contact>& extra = {}, const NodeId* exclude = nullptr) {
  struct ranked {
    NodeId distance;
    size_t order;
    const Contact* contact;
    bool operator<(const ranked& o) const {
      return distance != o.distance ? id_less{}(distance, o.distance) : order < o.order;
    }
  };
  std::vector<const Contact*> out;  // pointers into the views (or extra): a reply converts them once, to the wire
  std::vector<ranked> group;
  size_t order = 0;
  auto add = [&](const Contact& c) {
    if ((exclude && c.id == *exclude) || c.id == st.me.id) return;
    group.push_back({xor_distance(c.id, target), order++, &c});
  };
  // Sorts the group gathered and appends it (distances equal to the last one kept are the same id: skipped).
  auto take = [&] {
    std::sort(group.begin(), group.end());
    for (size_t i = 0; i < group.size() && out.size() < n; ++i)
      if (i == 0 || group[i].distance != group[i - 1].distance) out.push_back(group[i].contact);
    group.clear();
  };
  if (!extra.empty()) {  // bootstrap contacts may fall anywhere: rank everything together
    for (const auto& [i, v] : st.views)
      for (const auto& c : v) add(c);
    for (const auto& c : extra) add(c);
    take();
    return out;
  }
  const int j = bucket_index(st.me.id, target);
  if (auto it = st.views.find(j); it != st.views.end()) {
    for (const auto& c : it->second) add(c);
    take();
  }
  if (out.size() < n) {
    for (auto it = st.views.begin(); it != st.views.end() && it->first < j; ++it)
      for (const auto& c : it->second) add(c);
    take();
  }
  for (auto it = st.views.upper_bound(j); it != st.views.end() && out.size() < n; ++it) {
    for (const auto& c : it->second) add(c);
    take();
  }
  return out;
}

std::vector<dht_contact> wire_contacts(const std::vector<const Contact*>& cs) {
  std::vector<dht_contact> out;
  out.reserve(cs.size());
  for (const Contact* c : cs) out.push_back(to_wire(*c));
  return out;
}

std::vector<Contact> copies(const std::vector<const Contact*>& cs) {
  std::vector<Contact> out;
  out.reserve(cs.size());
  for (const Contact* c : cs) out.push_back(*c);
  return out;
}

// A bucket refresh looks up a random id in the bucket's range to meet nodes there; converging on a few of them is
// enough (the self-lookup at bootstrap converges on k, for the buckets nearest this node).
constexpr size_t kRefreshWidth = 5;

// --- lookups ----------------------------------------------------------------------------------------------------

// A lookup converges on the `width` nodes closest to the target (0: k). Finding where to store converges on the
// replicas it stores on, not on k: each further node to converge on costs queries, and a reader's lookup still
// converges on k, which holds those few.
template <class Then>
void run_lookup(node_actor* self, const NodeId& target, bool find_value, const std::vector<Contact>& extra, Then then,
                size_t width = 0) {
  auto& st = self->state;
  lookup_params p{target,
                  find_value,
                  st.me,
                  Lookup::Options{width > 0 ? width : st.opt.k, st.opt.alpha},
                  st.opt.replicas,
                  st.opt.rpc_timeout,
                  st.opt.lookup_timeout,
                  copies(closest(st, target, st.opt.k, extra)),
                  st.opt.wall};
  auto lookup = spawn_lookup(self, dht_node_parts{self}, std::move(p), st.connector);
  st.lookups.insert(lookup);
  // The lookup answers by its deadline; the margin covers the RPCs still in flight then.
  self->request(lookup, st.opt.lookup_timeout + 2 * st.opt.rpc_timeout, lookup_atom::value)
      .then(
          [=](lookup_result& r) mutable {
            self->state.lookups.erase(lookup);
            for (const auto& c : r.answered) note_seen(self, c);  // one message for the whole lookup
            then(std::move(r));
          },
          [=](caf::error&) mutable {
            self->state.lookups.erase(lookup);
            then(lookup_result{});
          });
}

// Stores `entries` of `key` on the `replicas` nodes nearest to it among `found` (and this node, in server mode),
// then calls done(stored, answered, problem): how many nodes stored every entry, how many answered, and the
// first error met.
template <class Done>
void store_on_nearest(node_actor* self, const NodeId& key, std::vector<Entry> entries,
                      const std::vector<Contact>& found, Done done) {
  auto& st = self->state;
  std::vector<Contact> targets = found;
  if (!st.opt.client_mode) targets.push_back(st.me);
  targets = closest_contacts(std::move(targets), key, st.opt.replicas);
  struct Tally {
    size_t pending = 0, stored = 0, answered = 0;
    std::string problem;
  };
  auto tally = std::make_shared<Tally>();
  tally->pending = targets.size();
  auto finish_one = [=]() mutable {
    if (--tally->pending == 0) done(tally->stored, tally->answered, tally->problem);
  };
  if (targets.empty()) {
    done(0, 0, std::string("no DHT node is known (bootstrap first)"));
    return;
  }
  const auto now = self->clock().now();
  for (const auto& t : targets) {
    if (t.id == st.me.id) {
      bool all = true;
      for (const auto& [subkey, v] : entries)
        all = st.storage.put(key, subkey, v.value, v.expiration, now) == DhtStorage::Put::stored && all;
      ++tally->answered;
      if (all) ++tally->stored;
      finish_one();
      continue;
    }
    dht_call<dht_store_reply>(
        self, st.connector, t.address, st.opt.rpc_timeout,
        dht_store_request{to_wire(st.me), id_bytes(key), to_items(entries, now), {}},
        [=](const dht_store_reply& r) mutable {
          ++tally->answered;
          bool all = r.stored.size() == entries.size();
          for (bool s : r.stored) all = all && s;
          if (all)
            ++tally->stored;
          else if (tally->problem.empty())
            tally->problem = t.address + " keeps a later-expiring entry";
          if (auto c = from_wire(r.responder); c && c->id == t.id) note_seen(self, t);
          finish_one();
        },
        [=](const caf::error& e) mutable {
          note_failed(self, t.id);
          if (tally->problem.empty()) tally->problem = t.address + ": " + describe(e);
          finish_one();
        });
  }
}

// Entries nobody stored here again within a republish period go to the key's nearest nodes again.
void republish(node_actor* self) {
  auto& st = self->state;
  const auto now = self->clock().now();
  std::map<NodeId, std::vector<Entry>> due;
  st.storage.for_each(now, [&](const NodeId& key, const std::string& subkey, const DhtValue& v, DhtTime stored_at) {
    if (now - stored_at >= st.opt.republish_period) due[key].emplace_back(subkey, v);
  });
  for (auto& [key, entries] : due) {
    run_lookup(
        self, key, false, {},
        [=, key = key, entries = std::move(entries)](lookup_result r) {
          for (size_t first = 0; first < entries.size(); first += kMaxDhtItemsPerStore) {
            std::vector<Entry> chunk(
                entries.begin() + static_cast<std::ptrdiff_t>(first),
                entries.begin() + static_cast<std::ptrdiff_t>(std::min(entries.size(), first + kMaxDhtItemsPerStore)));
            store_on_nearest(self, key, std::move(chunk), r.closest, [](size_t, size_t, const std::string&) {});
          }
        },
        st.opt.replicas);
  }
}

// --- requests from other nodes ----------------------------------------------------------------------------------

std::string id_problem(const std::string& bytes, const char* what) {
  if (bytes.size() == kIdBytes) return {};
  return std::string(what) + " has " + std::to_string(bytes.size()) + " bytes; DHT ids have " +
         std::to_string(kIdBytes);
}

// Why an incoming RPC is refused (empty: it is not). A sender that names an address is added to the table.
std::string admit(node_actor* self, const std::string& wire_error, const dht_contact& sender) {
  if (!wire_error.empty()) return wire_error;
  if (self->state.opt.client_mode) return "this DHT node runs in client mode and serves no requests";
  if (auto p = id_problem(sender.id, "the sender's id"); !p.empty()) return p;
  if (sender.address.size() > 256) return "the sender's address is longer than 256 bytes";
  return {};
}

caf::error refuse(const std::string& why) { return make_error(errc::bad_request, why); }

std::string check_entry(const std::string& subkey, size_t value_bytes) {
  if (value_bytes > kMaxDhtValueBytes)
    return "the value of subkey '" + subkey.substr(0, 64) + "' has " + std::to_string(value_bytes) +
           " bytes; the limit is " + std::to_string(kMaxDhtValueBytes);
  if (subkey.size() > kMaxDhtSubkeyBytes)
    return "a subkey has " + std::to_string(subkey.size()) + " bytes; the limit is " +
           std::to_string(kMaxDhtSubkeyBytes);
  return {};
}

dht_node_internal::behavior_type dht_node(node_actor* self, dht_options opt, caf::actor connector) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.me = Contact{st.opt.id, st.opt.client_mode ? std::string() : st.opt.address};
  st.connector = std::move(connector);
  st.storage = DhtStorage(DhtStorage::Options{st.opt.max_subkeys});
  st.rng = rng_from_id(st.opt.id);
  self->set_default_handler([](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    return make_error(errc::unexpected_message, "unexpected message " + caf::to_string(x.content()));
  });
  self->delayed_send(self, st.opt.purge_period, sweep_atom::value);
  if (!st.opt.client_mode) {
    // The first republish comes between half a period and a period from now: nodes do not all republish at once.
    const auto half = std::max<int64_t>(1, st.opt.republish_period.count() / 2);
    self->delayed_send(self, caf::timespan{half + static_cast<int64_t>(st.rng() % static_cast<uint64_t>(half))},
                       republish_atom::value);
  }

  return {
      // --- RPCs from other nodes ---
      [=](const dht_ping_request& req) -> caf::result<dht_ping_reply> {
        if (auto why = admit(self, req.wire_error, req.sender); !why.empty()) return refuse(why);
        note_seen(self, *from_wire(req.sender));
        return dht_ping_reply{to_wire(self->state.me), {}};
      },
      [=](const dht_find_node_request& req) -> caf::result<dht_find_node_reply> {
        if (auto why = admit(self, req.wire_error, req.sender); !why.empty()) return refuse(why);
        if (auto p = id_problem(req.target, "the target id"); !p.empty()) return refuse(p);
        const Contact sender = *from_wire(req.sender);
        note_seen(self, sender);
        auto& s = self->state;
        return dht_find_node_reply{
            to_wire(s.me), wire_contacts(closest(s, *id_from_bytes(req.target), s.opt.k, {}, &sender.id)), {}};
      },
      [=](const dht_find_value_request& req) -> caf::result<dht_find_value_reply> {
        if (auto why = admit(self, req.wire_error, req.sender); !why.empty()) return refuse(why);
        if (auto p = id_problem(req.key, "the key id"); !p.empty()) return refuse(p);
        const Contact sender = *from_wire(req.sender);
        note_seen(self, sender);
        auto& s = self->state;
        const NodeId key = *id_from_bytes(req.key);
        const auto now = self->clock().now();
        dht_find_value_reply reply{to_wire(s.me), {}, wire_contacts(closest(s, key, s.opt.k, {}, &sender.id)), {}};
        s.storage.visit(key, now, [&](const std::string& subkey, const DhtValue& v) {
          reply.items.push_back({subkey, v.value, ttl_ns(v.expiration, now)});
        });
        return reply;
      },
      [=](const dht_store_request& req) -> caf::result<dht_store_reply> {
        if (auto why = admit(self, req.wire_error, req.sender); !why.empty()) return refuse(why);
        if (auto p = id_problem(req.key, "the key id"); !p.empty()) return refuse(p);
        if (req.items.size() > kMaxDhtItemsPerStore)
          return refuse(std::to_string(req.items.size()) + " items in one store; the limit is " +
                        std::to_string(kMaxDhtItemsPerStore));
        for (const auto& item : req.items)
          if (auto p = check_entry(item.subkey, item.value.size()); !p.empty()) return refuse(p);
        note_seen(self, *from_wire(req.sender));
        auto& s = self->state;
        const NodeId key = *id_from_bytes(req.key);
        const auto now = self->clock().now();
        // What its entries count against (storage.hpp).
        const std::string origin = s.opt.origin ? s.opt.origin(self->current_sender()) : peer_origin(self);
        dht_store_reply reply{to_wire(s.me), {}, {}};
        for (const auto& item : req.items) {
          if (item.ttl_ns > kMaxDhtTtlNs) {  // refused, not shortened: the sender lies or runs another protocol
            reply.stored.push_back(false);
            continue;
          }
          // A record held as it is needs no second check; one the origin's quotas refuse needs none either.
          const auto pre = s.storage.precheck(key, item.subkey, item.value, origin, now);
          if (pre != DhtStorage::Precheck::check) {
            reply.stored.push_back(pre == DhtStorage::Precheck::held);
            continue;
          }
          // Only a record its subkey's owner signed is kept, and no longer than the signature says.
          const auto expiration = record_expiration(key, item.subkey, item.value,
                                                    now + std::chrono::nanoseconds(std::max<int64_t>(item.ttl_ns, 0)),
                                                    now, nullptr, s.opt.wall);
          reply.stored.push_back(expiration && s.storage.put(key, item.subkey, item.value, *expiration, now, origin) ==
                                                   DhtStorage::Put::stored);
        }
        return reply;
      },

      // --- the actor API (dht_api.hpp) ---
      [=](dht_put& req) -> caf::result<dht_put_reply> {
        if (auto p = check_entry(req.subkey, req.value.size()); !p.empty()) return refuse(p);
        if (req.expiration <= self->clock().now())
          return refuse("the expiration of '" + req.key + "' / '" + req.subkey + "' is not in the future");
        const NodeId key = key_id(req.key);
        std::string problem;
        const auto expiration = record_expiration(key, req.subkey, req.value, req.expiration, self->clock().now(),
                                                  &problem, self->state.opt.wall);
        if (!expiration) return refuse("the record of '" + req.key + "' / '" + req.subkey + "' is refused: " + problem);
        auto rp = self->make_response_promise<dht_put_reply>();
        std::vector<Entry> entries{{req.subkey, DhtValue{std::move(req.value), *expiration}}};
        auto deliver = [=, name = req.key](size_t stored, size_t answered, const std::string& problem) mutable {
          if (stored > 0)
            rp.deliver(dht_put_reply{stored});
          else if (answered > 0)
            rp.deliver(refuse("'" + name + "' was not stored: " + problem));
          else
            rp.deliver(make_error(errc::peer_unavailable, "'" + name + "' was not stored: " + problem));
        };
        auto& reads = self->state.recent_reads;
        if (auto it = reads.find(key); it != reads.end() && self->clock().now() - it->second.at <= kReadReuse) {
          store_on_nearest(self, key, std::move(entries), it->second.closest, deliver);
          return rp;
        }
        run_lookup(
            self, key, false, {},
            [=](lookup_result r) mutable { store_on_nearest(self, key, entries, r.closest, deliver); },
            self->state.opt.replicas);
        return rp;
      },
      [=](const dht_get& req) -> caf::result<dht_get_reply> {
        auto rp = self->make_response_promise<dht_get_reply>();
        const NodeId key = key_id(req.key);
        run_lookup(self, key, true, {}, [=](lookup_result r) mutable {
          const auto now = self->clock().now();
          if (!r.closest.empty()) self->state.recent_reads[key] = {now, r.closest};
          dht_get_reply reply{{}, r.hops, r.queries, r.holders};
          for (auto& [subkey, v] : r.entries)
            if (v.expiration > now) reply.entries.emplace(subkey, std::move(v));
          for (auto& [subkey, v] : self->state.storage.get(key, now)) {
            auto [it, inserted] = reply.entries.try_emplace(subkey, v);
            if (!inserted && v.expiration > it->second.expiration) it->second = v;
          }
          rp.deliver(std::move(reply));
        });
        return rp;
      },
      [=](const dht_bootstrap& req) -> caf::result<dht_bootstrap_reply> {
        auto rp = self->make_response_promise<dht_bootstrap_reply>();
        if (req.peers.empty()) {
          rp.deliver(dht_bootstrap_reply{{}, contact_count(self->state)});
          return rp;
        }
        struct Progress {
          std::vector<std::string> peers;  // the initial peers, in the request's order
          size_t pending = 0;
          std::vector<std::string> answered;
          std::vector<std::string> failed;  // per initial peer, why it did not answer ("" when it did)
          std::vector<Contact> contacts;
        };
        auto prog = std::make_shared<Progress>();
        prog->peers = req.peers;
        self->state.initial_peers = req.peers;
        prog->pending = req.peers.size();
        prog->failed.resize(req.peers.size());
        // Once every peer answered or failed: look up our own id, which fills the buckets near it; the farther ones
        // fill with the traffic the node meets (every contact is noted), and one nobody met for refresh_period is
        // refreshed then. hivemind (Petals' DHT) joins the same way. Refreshing every bucket farther than the
        // nearest neighbour at once, as the Kademlia paper has it, was about 9 lookups per joining node and a
        // quarter of a joining swarm's DHT queries.
        auto joined = [=]() mutable {
          if (prog->answered.empty()) {
            std::vector<std::string> why;
            for (size_t i = 0; i < prog->peers.size(); ++i)
              why.push_back(prog->peers[i] + " (" + prog->failed[i] + ")");
            log::warn(log::Part::dht, [&] { return "join failed: none of the initial peers answered: " + join(why); });
            rp.deliver(make_error(errc::peer_unavailable, "none of the initial peers answered: " + join(why)));
            return;
          }
          run_lookup(self, self->state.me.id, false, prog->contacts, [=](lookup_result r) mutable {
            std::set<NodeId> ids;
            for (const auto& c : prog->contacts) ids.insert(c.id);
            for (const auto& c : r.closest) ids.insert(c.id);
            log::info(log::Part::dht, [&] {
              return "joined: " + std::to_string(prog->answered.size()) + " of " + std::to_string(prog->peers.size()) +
                     " initial peers answered; " + std::to_string(ids.size()) + " contacts";
            });
            rp.deliver(dht_bootstrap_reply{prog->answered, ids.size()});
          });
        };
        for (size_t i = 0; i < prog->peers.size(); ++i) {
          const std::string peer = prog->peers[i];
          dht_call<dht_ping_reply>(
              self, self->state.connector, peer, self->state.opt.rpc_timeout,
              dht_ping_request{to_wire(self->state.me), {}},
              [=](const dht_ping_reply& r) mutable {
                if (auto c = from_wire(r.responder); c && c->id != self->state.me.id) {
                  const Contact contact{c->id, peer};  // the address that worked for us
                  note_seen(self, contact);
                  prog->answered.push_back(peer);
                  prog->contacts.push_back(contact);
                } else {
                  prog->failed[i] = c ? "this node itself" : "an unreadable reply";
                }
                if (--prog->pending == 0) joined();
              },
              [=](const caf::error& e) mutable {
                prog->failed[i] = describe(e);
                if (--prog->pending == 0) joined();
              });
        }
        return rp;
      },
      [=](const dht_find_nodes& req) -> caf::result<dht_find_nodes_reply> {
        auto rp = self->make_response_promise<dht_find_nodes_reply>();
        const NodeId target = req.key.empty() ? req.target : key_id(req.key);
        run_lookup(self, target, false, {}, [=](lookup_result r) mutable {
          rp.deliver(dht_find_nodes_reply{std::move(r.closest), r.hops, r.queries});
        });
        return rp;
      },
      [=](const dht_info_request&) -> dht_info {
        auto& s = self->state;
        dht_info info{s.me.id,          s.me.address, s.opt.client_mode, contact_count(s),
                      s.buckets.size(), {},           s.storage.keys(),  s.storage.entries()};
        for (const auto& [i, v] : s.views) info.table.insert(info.table.end(), v.begin(), v.end());
        return info;
      },
      [=](address_atom, const std::string& address) {
        auto& s = self->state;
        if (s.opt.client_mode || !from_own_node(self)) return;
        s.me.address = address;
        for (auto& [i, b] : s.buckets) self->send(b, address_atom::value, address);
      },

      // --- from the node's own actors and timers ---
      [=](const contact_seen& m) { note_seen(self, m.contact); },
      [=](const contact_failed& m) { note_failed(self, m.id); },
      [=](bucket_view& m) {
        auto& s = self->state;
        note_departures(self, s.views[m.index], m.contacts);
        if (m.contacts.empty())
          s.views.erase(m.index);
        else
          s.views[m.index] = std::move(m.contacts);
      },
      [=](sweep_atom) {
        if (!from_own_node(self)) return;
        auto& s = self->state;
        const auto now = self->clock().now();
        s.storage.purge(now);
        std::erase_if(s.reported, [&](const auto& e) { return now - e.second >= kMemberReportInterval; });
        std::erase_if(s.recent_reads, [&](const auto& e) { return now - e.second.at > kReadReuse; });
        for (auto& [index, met] : s.last_met)
          if (now - met >= s.opt.refresh_period) {
            met = now;
            run_lookup(
                self, random_id_in_bucket(s.me.id, index, s.rng), false, {}, [](lookup_result) {}, kRefreshWidth);
          }
        meet_again(self);
        self->delayed_send(self, self->state.opt.purge_period, sweep_atom::value);
      },
      [=](republish_atom) {
        if (!from_own_node(self)) return;
        republish(self);
        self->delayed_send(self, self->state.opt.republish_period, republish_atom::value);
      },
  };
}

}  // namespace

dht_node_actor spawn_dht_node(caf::actor_system& sys, dht_options options, caf::actor connector) {
  if (options.k == 0 || options.alpha == 0 || options.replicas == 0 || options.max_failures == 0)
    throw std::invalid_argument("DHT options: k, alpha, replicas and max_failures must be at least 1");
  return sys.spawn(dht_node, std::move(options), std::move(connector));
}

}  // namespace corolla
