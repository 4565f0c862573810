#include "actors/server/announcer.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>
#include <caf/all.hpp>

#include "actors/dht/announcer.hpp"
#include "actors/net/pings.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla {
namespace {

struct announcer_state {
  announcer_options opt;
  server_info_source gate;  // the server's gate: what is announced is what it tells
  dht_node_actor dht;
  caf::actor connector;
  std::shared_ptr<rtt_table> rtts = std::make_shared<rtt_table>();  // next servers, smoothed
  DhtTime models_due{};                                             // when the models list is announced again
  // One announcement at a time. A DHT node keeps the record that expires last, and an expiration travels as
  // time-to-live, counted from the record's arrival: of two announcements in flight together, a "joining" one sent
  // a few milliseconds before the "online" one but delayed longer on its way could expire later and stand until the
  // next period (a server that looked still loading). One asked for during another runs after it (several
  // coalesce into one), so its records leave once the earlier ones were stored, and arrive and expire later.
  bool announcing = false;
  // Each announcement's records expire at least a millisecond (what a signature carries) after the last one's: a
  // DHT node keeps the record that expires last, and a reader merging several nodes' copies does the same, so two
  // announcements in one millisecond ("joining", then "online" as the blocks finish loading) would otherwise tie.
  DhtTime last_expiration{};
  std::vector<std::function<void(size_t)>> queued;  // callers waiting for the next announcement
  uint64_t round = 0, announced_round = 0;          // refreshes, and the last one that announced
  static inline const char* name = "announcer";
};

using announce_due_atom = caf::atom_constant<caf::atom("annodue")>;

// The announcer's whole interface: announcer_handle and its own timers.
using announcer_impl =
    announcer_handle::extend<caf::reacts_to<refresh_atom>, caf::reacts_to<announce_due_atom, uint64_t>>;
using announcer_actor = announcer_impl::stateful_base<announcer_state>;

// As many of the next block's servers as Petals' servers ping per announcement (max_pinged = 5): the clients'
// routes need a few measured next hops per server, not all of them, and pings are a large share of a swarm's
// messages (docs/PERFORMANCE.md, "Simulator").
constexpr size_t kMaxPinged = 5;
// The models list (one entry per swarm, the same from every server of it) changes only when a swarm appears or
// goes: each server refreshes it every kModelsEvery periods, not every period, for it lands on the same few nodes.
constexpr int kModelsEvery = 10;

// Reads the servers announced for block `next`, calls read_done, then pings them (at most kMaxPinged, "online" ones)
// and smooths their round-trip times for the next announcement; a server that fails is forgotten. read_done comes
// before the pings so that an announcement waits for one DHT read, not for the pings too: over a lossy network a
// ping lost to its timeout held the announcement past the previous records' expiry at short periods, and readers
// missed live servers (random simulated worlds found it).
void read_next_hops(announcer_actor* self, int64_t next, std::function<void()> read_done) {
  auto& st = self->state;
  const std::string key = block_key(st.opt.model_prefix, next);
  self->request(st.dht, std::chrono::seconds(10), dht_get{key})
      .then(
          [=](dht_get_reply& r) {
            std::vector<std::string> targets;
            for (auto& s : parse_servers(key, r.entries, self->clock().now()))
              if (s.info.state == "online" && serves_block(s.info, next) && targets.size() < kMaxPinged)
                targets.push_back(s.info.address);
            auto& known = self->state.rtts->ms;  // servers no longer next (gone, or this server moved)
            for (auto it = known.begin(); it != known.end();)
              it = std::find(targets.begin(), targets.end(), it->first) == targets.end() ? known.erase(it)
                                                                                         : std::next(it);
            read_done();
            ping_peers(self, self->state.connector, targets, self->state.rtts, std::chrono::seconds(5), [] {});
          },
          [=](caf::error&) { read_done(); });
}

// Reads the gate's info, stamps the state and pings, stores one record per group of blocks (plus the models list);
// calls done with the number of records stored. Only through announce().
void announce_now(announcer_actor* self, std::function<void(size_t)> done) {
  auto& st = self->state;
  self->request(st.gate, std::chrono::seconds(10), info_request{})
      .then(
          [=](server_info& info) {
            auto& st = self->state;
            if (st.opt.state == "offline") info.state = "offline";  // otherwise the gate's: joining or online
            for (auto& [address, ms] : st.rtts->ms) info.pings.emplace_back(address, ms);
            const DhtTime expiration =
                std::max(self->clock().now() + 2 * st.opt.period, st.last_expiration + std::chrono::milliseconds(1));
            st.last_expiration = expiration;
            std::vector<dht_put> puts;
            try {
              puts = announce_puts(*st.opt.identity, st.opt.model_prefix, info, expiration, st.opt.wall);
            } catch (const std::exception&) {
              done(0);  // no address or no span yet: a later round announces
              return;
            }
            const DhtTime now = self->clock().now();
            if (now >= st.models_due) {
              st.models_due = now + kModelsEvery * st.opt.period;
              puts.push_back(models_put(*st.opt.identity, st.opt.model_prefix, info.total_blocks,
                                        now + 2 * kModelsEvery * st.opt.period, st.opt.wall));
            }
            auto pending = std::make_shared<size_t>(puts.size());
            auto stored = std::make_shared<size_t>(0);
            for (auto& put : puts)
              self->request(st.dht, std::chrono::seconds(30), std::move(put))
                  .then(
                      [=](const dht_put_reply&) {
                        ++*stored;
                        if (--*pending == 0) done(*stored);
                      },
                      [=](caf::error&) {
                        if (--*pending == 0) done(*stored);
                      });
          },
          [=](caf::error&) { done(0); });
}

void announce(announcer_actor* self, std::function<void(size_t)> done);

// A refresh's announcement, once: when its pings are in, or when it is due, whichever comes first.
void announce_round(announcer_actor* self, uint64_t round) {
  if (self->state.announced_round >= round) return;
  self->state.announced_round = round;
  announce(self, [](size_t) {});
}

// announce_now at once, or after the one in flight (see announcer_state::announcing).
void announce(announcer_actor* self, std::function<void(size_t)> done) {
  auto& st = self->state;
  if (st.announcing) {
    st.queued.push_back(std::move(done));
    return;
  }
  st.announcing = true;
  announce_now(self, [=](size_t stored) {
    done(stored);
    auto& st = self->state;
    st.announcing = false;
    if (st.queued.empty()) return;
    auto waiting = std::move(st.queued);
    st.queued.clear();
    announce(self, [waiting = std::move(waiting)](size_t n) {
      for (const auto& f : waiting) f(n);
    });
  });
}

announcer_impl::behavior_type announcer(announcer_actor* self, announcer_options opt, server_info_source gate,
                                        dht_node_actor dht, caf::actor connector) {
  self->state.opt = std::move(opt);
  self->state.gate = std::move(gate);
  self->state.dht = std::move(dht);
  self->state.connector = std::move(connector);
  self->send(self, refresh_atom::value);
  return {
      [=](refresh_atom) {
        // The span's end is in the info; read that block's servers, announce, then ping them (the read before the
        // announcement leaves the nodes to store on: kReadReuse, a sixth of a server's DHT messages). But announce
        // a quarter period after the refresh at the latest: over a lossy network a read took up to 15 s, past the
        // previous records' expiry at short periods, and readers missed live servers (found by random simulated
        // worlds).
        const uint64_t round = ++self->state.round;
        self->delayed_send(self, self->state.opt.period / 4, announce_due_atom::value, round);
        self->request(self->state.gate, std::chrono::seconds(10), info_request{})
            .then(
                [=](const server_info& info) {
                  if (info.last_block >= info.total_blocks) return announce_round(self, round);
                  read_next_hops(self, info.last_block, [=] { announce_round(self, round); });
                },
                [=](caf::error&) {});
        self->delayed_send(self, self->state.opt.period, refresh_atom::value);
      },
      [=](announce_due_atom, uint64_t round) { announce_round(self, round); },
      [=](state_atom, const std::string& state) -> caf::result<ack> {
        self->state.opt.state = state;
        auto rp = self->make_response_promise<ack>();
        announce(self, [=](size_t) mutable { rp.deliver(ack{}); });
        return rp;
      },
      [=](close_atom) -> caf::result<ack> {
        self->state.opt.state = "offline";
        auto rp = self->make_response_promise<ack>();
        announce(self, [=](size_t) mutable {
          rp.deliver(ack{});
          self->quit();
        });
        return rp;
      },
  };
}

}  // namespace

announcer_handle spawn_announcer(caf::actor_system& sys, announcer_options options, server_info_source gate,
                                 dht_node_actor dht, caf::actor connector) {
  if (!options.identity) throw std::invalid_argument("an announcer signs its records: it needs the server's identity");
  return sys.spawn(announcer, std::move(options), std::move(gate), std::move(dht), std::move(connector));
}

}  // namespace corolla
