#include "actors/balance/balancer.hpp"

#include <caf/all.hpp>
#include <random>
#include <set>

#include "actors/balance/block_selection.hpp"
#include "actors/dht/read_swarm.hpp"
#include "actors/log/node_log.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {
namespace {

struct balancer_state {
  balancer_options opt;
  balanced_gate gate;
  dht_node_actor dht;
  caf::actor loader;
  announcer_handle announcer;
  std::mt19937_64 rng;
  bool moving = false;
  bool joining = true;                        // no blocks loaded yet: balance_atom means "(re)choose the span"
  int64_t reserved = -1;                      // while joining: the first block of the span announced (not loaded)
  int rechoices = 0;                          // while joining: re-reads that moved the reservation
  std::set<std::string> known;                // the addresses this server's reads have seen
  caf::actor_clock::time_point swarm_grew{};  // when a read last saw a new one (or this server loaded)
  static inline const char* name = "balancer";
};

using balancer_actor = balancer_handle::stateful_base<balancer_state>;

// The joining phase and the settling window, in units of the mean check period (120 s by default; the bench and
// tests use shorter ones). Chosen with an offline model of the rule (docs/PERFORMANCE.md, "Balancing"). What
// matters in the joining phase is that re-reads come after the others' first reads, not how long they take, so
// its delays are also capped: a server does not wait minutes to start loading.
constexpr double kJoinDelayPeriods = 1.0 / 6;  // the first read waits uniform [0, this × period]
constexpr double kMaxJoinDelayS = 10;          // (at most this)
constexpr double kRereadPeriods = 0.5;         // re-reads while joining wait uniform [0, this × period]
constexpr double kMaxRereadS = 30;             // (at most this)
constexpr int kMaxRechoices = 3;               // then the server loads wherever it stands
constexpr double kQuietPeriods = 1;            // the settling window opens this long after the swarm last grew
constexpr double kSettlingPeriods = 2;         // and stays open this long
constexpr double kSettlingCheckSpeedup = 3;    // checks that much more often while it is open

void report(balancer_actor* self, const balancer_event& e) {
  const char* what = e.kind == balancer_event::placed ? "placed" : e.kind == balancer_event::moved ? "moved" : nullptr;
  if (what)
    log::info(log::Part::balance, [&] {
      return std::string(what) + ": blocks " + block_span(e.first, e.last) + "; swarm's weakest block " +
             std::to_string(e.check.current_min);
    });
  if (e.kind == balancer_event::failed) log::warn(log::Part::balance, [&] { return "failed: " + e.error; });
  if (self->state.opt.on_event) self->state.opt.on_event(e);
}

void fail(balancer_actor* self, caf::error e) {
  balancer_event ev;
  ev.kind = balancer_event::failed;
  ev.error = describe(e);
  report(self, ev);
  self->quit(std::move(e));
}

caf::timespan uniform_delay(balancer_actor* self, double max_seconds) {
  const double delay = std::uniform_real_distribution<double>(0, max_seconds)(self->state.rng);
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(delay));
}

double mean_period_s(balancer_actor* self) {
  return std::chrono::duration<double>(self->state.opt.mean_check_period).count();
}

// Whether the settling window is open: the swarm (as this server's reads see it) has not grown for a while, so
// the servers that arrived one after the other are all there, but not for long, so that a swarm that has settled
// keeps Petals' rule.
bool settling(balancer_actor* self) {
  const auto since = self->clock().now() - self->state.swarm_grew;
  const auto period = self->state.opt.mean_check_period;
  return since >= kQuietPeriods * period && since < (kQuietPeriods + kSettlingPeriods) * period;
}

// Notes the servers of a read; a new address means the swarm grew.
void observe(balancer_actor* self, const std::vector<server_info>& swarm) {
  for (const auto& s : swarm)
    if (self->state.known.insert(s.address).second) self->state.swarm_grew = self->clock().now();
}

// The next check after a random delay: uniform in [0, 2 × the mean period], a third of that while settling.
void schedule_check(balancer_actor* self) {
  const double mean = mean_period_s(self) / (settling(self) ? kSettlingCheckSpeedup : 1);
  self->delayed_send(self, uniform_delay(self, 2 * mean), balance_atom::value);
}

// Announces `state` and waits until it is stored, then calls next.
void announce(balancer_actor* self, const std::string& state, std::function<void()> next) {
  self->request(self->state.announcer, self->state.opt.request_timeout, state_atom::value, state)
      .then([=](const ack&) { next(); }, [=](caf::error& e) { fail(self, std::move(e)); });
}

// Points the gate at [first, last) (its sessions end, it is joining) and announces that; then next.
void reserve(balancer_actor* self, int64_t first, int64_t last, std::function<void()> next) {
  self->request(self->state.gate, self->state.opt.request_timeout, span_atom::value, first, last)
      .then([=](const ack&) { announce(self, "online", next); },  // "joining" under the new blocks (the gate's)
            [=](caf::error& e) { fail(self, std::move(e)); });
}

// Loads the gate's span [first, last), installs it and announces "online"; then done.
void load(balancer_actor* self, int64_t first, int64_t last, std::function<void()> done) {
  self->request(self->state.loader, caf::infinite, load_atom::value, first, last)
      .then(
          [=](std::vector<caf::actor>& blocks) {
            self->request(self->state.gate, self->state.opt.request_timeout, blocks_atom::value, std::move(blocks))
                .then([=](const ack&) { announce(self, "online", done); },
                      [=](caf::error& e) { fail(self, std::move(e)); });
          },
          [=](caf::error& e) { fail(self, std::move(e)); });
}

// Moves a serving server to [first, last): offline, the gate to the new span (joining), load, install, online.
void move_to(balancer_actor* self, int64_t first, int64_t last, std::function<void()> done) {
  self->state.moving = true;
  announce(self, "offline", [=] {
    reserve(self, first, last, [=] {
      load(self, first, last, [=] {
        self->state.moving = false;
        done();
      });
    });
  });
}

// The gate's info, then f(info).
void with_info(balancer_actor* self, std::function<void(server_info&)> f) {
  self->request(self->state.gate, self->state.opt.request_timeout, info_request{})
      .then([=](server_info& info) { f(info); }, [=](caf::error& e) { fail(self, std::move(e)); });
}

// Loads the reserved span and starts checking.
void settle_in(balancer_actor* self, int64_t n) {
  const int64_t first = self->state.reserved;
  load(self, first, first + n, [=] {
    auto& st = self->state;
    st.joining = false;
    st.swarm_grew = self->clock().now();
    balancer_event ev;
    ev.kind = balancer_event::placed;
    ev.first = first;
    ev.last = first + n;
    ev.rechoices = st.rechoices;
    report(self, ev);
    schedule_check(self);
  });
}

// One step of joining: read the swarm, choose (or re-choose) the span and announce it, and re-read after a random
// delay, so that servers started together see each other's reservations and spread out before any loads. A
// re-read that keeps the span, or the last one allowed, loads it.
void choose_span(balancer_actor* self) {
  with_info(self, [=](server_info& me) {
    const int64_t total = me.total_blocks, n = std::min(self->state.opt.num_blocks, me.total_blocks);
    const std::string address = me.address;
    const double rate = me.throughput;
    read_swarm(self, self->state.dht, self->state.opt.model_prefix, total, self->state.opt.request_timeout,
               [=](std::vector<server_info> swarm) {
                 auto& st = self->state;
                 std::erase_if(swarm, [&](const server_info& s) { return s.address == address; });
                 observe(self, swarm);
                 const auto others = block_throughputs(swarm, total);
                 const int64_t first = st.reserved < 0 ? choose_first_block(others, n)
                                                       : rechoose_first_block(others, n, st.reserved, rate);
                 if (first == st.reserved) return settle_in(self, n);
                 const bool last_try = st.reserved >= 0 && ++st.rechoices >= kMaxRechoices;
                 st.reserved = first;
                 reserve(self, first, first + n, [=] {
                   if (last_try) return settle_in(self, n);
                   self->delayed_send(self,
                                      uniform_delay(self, std::min(kRereadPeriods * mean_period_s(self), kMaxRereadS)),
                                      balance_atom::value);
                 });
               });
  });
}

void check(balancer_actor* self) {
  if (self->state.joining) return choose_span(self);
  if (self->state.moving) return;
  with_info(self, [=](server_info& me) {
    if (me.state != "online" || me.first_block >= me.last_block) return schedule_check(self);
    read_swarm(self, self->state.dht, self->state.opt.model_prefix, me.total_blocks, self->state.opt.request_timeout,
               [=](std::vector<server_info> swarm) {
                 // This server as it is now, whatever the DHT still holds about it.
                 std::erase_if(swarm, [&](const server_info& s) { return s.address == me.address; });
                 observe(self, swarm);
                 swarm.push_back(me);
                 balancer_event ev;
                 ev.kind = balancer_event::checked;
                 ev.settling = settling(self);
                 const double quality = check_quality(self->state.opt.balance_quality, ev.settling, me.sessions);
                 ev.check = check_rebalance(swarm, me.address, me.total_blocks, quality, self->state.rng);
                 ev.first = me.first_block;
                 ev.last = me.last_block;
                 report(self, ev);
                 if (!ev.check.move) return schedule_check(self);
                 const int64_t first = ev.check.new_first, last = first + (me.last_block - me.first_block);
                 move_to(self, first, last, [=] {
                   balancer_event moved = ev;
                   moved.kind = balancer_event::moved;
                   moved.first = first;
                   moved.last = last;
                   report(self, moved);
                   schedule_check(self);
                 });
               });
  });
}

balancer_handle::behavior_type balancer(balancer_actor* self, balancer_options opt, balanced_gate gate,
                                        dht_node_actor dht, announcer_handle announcer, caf::actor loader) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.gate = std::move(gate);
  st.dht = std::move(dht);
  st.announcer = std::move(announcer);
  st.loader = std::move(loader);
  st.rng.seed(st.opt.seed);
  self->delayed_send(self, uniform_delay(self, std::min(kJoinDelayPeriods * mean_period_s(self), kMaxJoinDelayS)),
                     balance_atom::value);
  return {
      [=](balance_atom) { check(self); },
  };
}

}  // namespace

balancer_handle spawn_balancer(caf::actor_system& sys, balancer_options options, balanced_gate gate, dht_node_actor dht,
                               announcer_handle announcer, caf::actor loader) {
  if (options.num_blocks < 1)
    throw std::invalid_argument("the balancer needs num_blocks >= 1, got " + std::to_string(options.num_blocks));
  if (!(options.balance_quality >= 0))
    throw std::invalid_argument("balance_quality must be >= 0, got " + std::to_string(options.balance_quality));
  return sys.spawn(balancer, std::move(options), std::move(gate), std::move(dht), std::move(announcer),
                   std::move(loader));
}

}  // namespace corolla
