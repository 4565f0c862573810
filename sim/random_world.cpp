#include "sim/random_world.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sim/invariants.hpp"

namespace corolla::sim {
namespace {

// Draws from the world's one stream. Integer and real draws are written out (not std's distributions, whose
// algorithms the standard leaves open) so that a seed names the same world wherever it is run.
class Dice {
 public:
  explicit Dice(uint64_t seed) : rng_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  int64_t between(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
  }
  double real(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return real(0, 1) < p; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(between(0, static_cast<int64_t>(v.size()) - 1))];
  }
  // Rounded to a millisecond, so that the world written as TOML reads back the same.
  double time(double lo, double hi) { return std::round(real(lo, hi) * 1000) / 1000; }

 private:
  std::mt19937_64 rng_;
};

model_shape draw_model(Dice& d) {
  model_shape m;
  m.blocks = d.between(2, 16);
  m.hidden_size = d.pick(std::vector<int64_t>{256, 512, 1024});
  m.heads = m.hidden_size / 64;
  m.kv_heads = d.chance(0.5) ? m.heads : m.heads / 4;
  m.intermediate_size = m.hidden_size * d.between(2, 4);
  m.vocab_size = d.between(500, 4000);
  m.dtype = d.pick(std::vector<DType>{DType::f16, DType::bf16, DType::q8_0, DType::q4_0});
  if (d.chance(0.15)) {
    m.experts = d.between(2, 8);
    m.experts_per_token = d.between(1, std::min<int64_t>(2, m.experts));
  }
  m.swarms = d.chance(0.15) ? 2 : 1;
  return m;
}

network_model draw_network(Dice& d) {
  network_model n;
  const int64_t regions = d.between(1, 3);
  for (int64_t i = 0; i < regions; ++i) n.regions.push_back({"r" + std::to_string(i)});
  n.local_ms = d.time(0.1, 5);
  for (int64_t a = 0; a < regions; ++a)
    for (int64_t b = a + 1; b < regions; ++b)
      n.latencies.push_back({n.regions[a].name, n.regions[b].name, d.time(5, 120)});
  n.bandwidth_mbps = d.pick(std::vector<double>{50, 100, 1000, 10000});
  n.loss = d.chance(0.25) ? d.time(0.001, 0.02) : 0;
  n.connection_timeout_s = d.pick(std::vector<double>{0.5, 1, 2});
  return n;
}

std::vector<server_class> draw_servers(Dice& d, const scenario& sc) {
  std::vector<server_class> out;
  const int64_t classes = d.between(1, 3);
  for (int64_t i = 0; i < classes; ++i) {
    server_class c;
    c.name = "c" + std::to_string(i);
    c.count = d.between(1, 5);
    c.region = d.pick(sc.network.regions).name;
    c.tflops = d.time(2, 120);
    c.memory_bandwidth_gbs = d.time(50, 2000);
    c.op_overhead_us = d.time(1, 20);
    c.jitter = d.time(0, 0.3);
    // Mostly spans of a third of the model or more, so that most worlds can serve it (and sessions run to check);
    // some of any size, for the worlds that cannot.
    c.num_blocks =
        d.chance(0.85) ? d.between((sc.model.blocks + 2) / 3, sc.model.blocks) : d.between(1, sc.model.blocks);
    c.cache_tokens = d.pick(std::vector<int64_t>{256, 1024, 4096, 16384});
    c.max_batch_tokens = d.pick(std::vector<int64_t>{0, 16, 64, 256});
    c.bandwidth_mbps = d.chance(0.3) ? d.pick(std::vector<double>{20, 100, 1000}) : 0;
    c.start_s = d.time(0, 20);
    c.start_spread_s = d.time(0, 30);
    out.push_back(c);
  }
  // Most worlds can serve the model (and so run sessions to check): enough servers of the widest class are added
  // to cover it once; the rest keep what they drew, for the worlds that cannot.
  int64_t capacity = 0;
  for (const auto& c : out) capacity += c.count * c.num_blocks;
  if (capacity < sc.model.blocks && d.chance(0.85)) {
    auto widest = std::max_element(out.begin(), out.end(), [](const server_class& a, const server_class& b) {
      return a.num_blocks < b.num_blocks;
    });
    widest->count += (sc.model.blocks - capacity + widest->num_blocks - 1) / widest->num_blocks;
  }
  return out;
}

client_workload draw_workload(Dice& d, const scenario& sc) {
  client_workload w;
  w.clients = d.between(1, 3);
  for (int64_t i = 0, n = d.between(1, static_cast<int64_t>(sc.network.regions.size())); i < n; ++i)
    w.regions.push_back(sc.network.regions[static_cast<size_t>(i)].name);
  w.sessions = d.between(1, 8);
  w.arrival_rate_per_s = d.chance(0.3) ? 0 : d.time(0.05, 2);
  w.start_s = d.time(60, 120);
  w.prompt_tokens = d.between(1, 40);
  w.prompt_tokens_max = d.chance(0.5) ? w.prompt_tokens + d.between(0, 40) : 0;
  w.new_tokens = d.between(1, 40);
  w.new_tokens_max = d.chance(0.5) ? w.new_tokens + d.between(0, 40) : 0;
  w.max_length =
      std::max(w.prompt_tokens, w.prompt_tokens_max) + std::max(w.new_tokens, w.new_tokens_max) + d.between(0, 64);
  w.mode = d.chance(0.5) ? "relay" : "push";
  w.request_timeout_s = d.pick(std::vector<double>{5, 10, 30});
  w.recovery_timeout_s = d.pick(std::vector<double>{30, 60, 120});
  w.spot_check_every = d.chance(0.5) ? 0 : d.between(4, 64);
  return w;
}

// Faults in the window where sessions run: up to six, of every kind the world can stage (a restart brings back a
// server that crashed or left before it, if any).
churn_model draw_churn(Dice& d, const scenario& sc) {
  churn_model c;
  const double from = sc.workload.start_s, to = from + d.time(10, 200);
  std::vector<std::string> kinds = {"crash", "leave", "freeze", "join", "slow", "restart"};
  if (sc.network.regions.size() > 1) kinds.push_back("partition");
  for (int64_t i = 0, n = d.between(0, 6); i < n; ++i) {
    churn_event e;
    e.at_s = d.time(from, to);
    e.kind = d.pick(kinds);
    if (e.kind == "freeze" || e.kind == "partition" || e.kind == "slow") e.duration_s = d.time(1, 90);
    if (e.kind == "slow") e.latency_ms = d.time(20, 3000);
    if (e.kind == "partition") e.region = d.pick(sc.network.regions).name;
    if (e.kind == "join") e.server_class = d.pick(sc.servers).name;
    c.events.push_back(e);
  }
  std::sort(c.events.begin(), c.events.end(),
            [](const churn_event& a, const churn_event& b) { return a.at_s < b.at_s; });
  return c;
}

// Hostile servers, in a fifth of the worlds: a class like one of the honest ones, of one or two servers that make
// their outputs wrong on every step, or on some with the clients checking every step (the two settings where
// session-output holds, sim/invariants.hpp). Drawn last, so that the rest of a seed's world is what it was before
// worlds had liars.
void draw_liars(Dice& d, scenario& sc) {
  if (!d.chance(0.2)) return;
  server_class liar = d.pick(sc.servers);
  liar.name = "liar";
  liar.count = d.between(1, 2);
  liar.wrong_outputs = d.chance(0.5) ? 1 : d.time(0.05, 0.5);
  sc.servers.push_back(liar);
  if (liar.wrong_outputs < 1)
    sc.workload.spot_check_every = 1;
  else if (sc.workload.spot_check_every == 0)
    sc.workload.spot_check_every = d.between(4, 64);
}

// Impostors, in a sixth of the worlds (drawn after the liars, for the same reason): one or two DHT peers announcing
// copies of live servers' records under their own keys from some time before the sessions start; in half of those
// worlds they also forge records under the servers' own subkeys.
void draw_impostors(Dice& d, scenario& sc) {
  if (!d.chance(1.0 / 6)) return;
  sc.hostile.impostors = d.between(1, 2);
  sc.hostile.impostor_start_s = d.time(0, sc.workload.start_s);
  sc.hostile.impostor_period_s = d.pick(std::vector<double>{10, 30, 60});
  sc.hostile.forge = d.chance(0.5);
}

// Training sessions, in a quarter of the worlds (drawn last, for the same reason): one to three, each a few forward
// and backward passes of a small batch, some split into sub-batches with routes of their own.
void draw_training(Dice& d, scenario& sc) {
  if (!d.chance(0.25)) return;
  auto& w = sc.workload;
  w.training_sessions = d.between(1, 3);
  w.training_steps = d.between(1, 6);
  w.training_batch = d.between(1, 8);
  w.training_tokens = d.between(1, 32);
  w.training_max_batch_tokens = d.pick(std::vector<int64_t>{w.training_tokens, 2 * w.training_tokens, 4096});
}

// Skewed clocks, in a quarter of the worlds (drawn last): each server's wall clock off by up to an eighth of the
// announce period, what a record's life of two periods leaves room for beside an announcement's and a read's delays
// (docs/dht.md, "Clocks").
void draw_skew(Dice& d, scenario& sc) {
  if (d.chance(0.25)) sc.network.clock_skew_s = d.time(0, sc.announce_period_s / 8);
}

// Floods, in half of the impostor worlds (drawn last): each impostor stores records under 64 to 1024 subkeys of its
// own in every key of a swarm, every period.
void draw_flood(Dice& d, scenario& sc) {
  if (sc.hostile.impostors > 0 && d.chance(0.5)) sc.hostile.flood_subkeys = d.pick(std::vector<int64_t>{64, 256, 1024});
}

}  // namespace

scenario random_scenario(uint64_t seed) {
  Dice d(seed);
  scenario sc;
  sc.name = "random-" + std::to_string(seed);
  sc.source = "random world " + std::to_string(seed);
  sc.seed = seed;
  sc.check_outputs = true;
  sc.announce_period_s = d.pick(std::vector<double>{10, 30, 60});
  sc.mean_balance_check_s = d.pick(std::vector<double>{30, 60, 120});
  sc.balance_quality = d.time(0.5, 0.9);
  sc.model = draw_model(d);
  sc.network = draw_network(d);
  sc.servers = draw_servers(d, sc);
  sc.workload = draw_workload(d, sc);
  sc.churn = draw_churn(d, sc);
  draw_liars(d, sc);
  draw_impostors(d, sc);
  draw_training(d, sc);
  draw_skew(d, sc);
  draw_flood(d, sc);
  // The last arrival, the last fault, then every bound's worth of quiet.
  double last = sc.workload.start_s;
  if (sc.workload.arrival_rate_per_s > 0)
    last +=
        3 * static_cast<double>(sc.workload.sessions + sc.workload.training_sessions) / sc.workload.arrival_rate_per_s;
  for (const auto& e : sc.churn.events) last = std::max(last, e.at_s + e.duration_s);
  const invariant_bounds b = bounds_for(sc);
  sc.duration_s = std::ceil(last + std::max({b.stall_s * 2, b.cover_s, b.dht_s}) + b.settle_s + 60);
  return sc;
}

}  // namespace corolla::sim
