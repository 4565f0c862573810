// The simulator as a bug-finder: random worlds (drawn from a seed, written as TOML that reads back the same),
// the invariants' own rules, a random world's replay (the same seed, the same log), a world built to break an
// invariant (servers that never rebalance leave a crashed server's blocks unserved) reported as broken, and the
// worlds in which sweeps found bugs (sim/scenarios/regressions/), each keeping every invariant now.
#define BOOST_TEST_MODULE sim_random
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <set>
#include <tuple>

#include "model/local_model.hpp"
#include "sim/cost_backend.hpp"
#include "sim/invariants.hpp"
#include "sim/random_world.hpp"
#include "sim/report.hpp"
#include "sim/scenario_toml.hpp"
#include "sim/sweep.hpp"
#include "sim/synthetic_weights.hpp"
#include "sim/world.hpp"

using namespace corolla;
using namespace corolla::sim;

BOOST_AUTO_TEST_CASE(random_worlds_read_back_from_their_toml) {
  std::set<std::string> texts;
  std::set<std::string> kinds;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const scenario sc = random_scenario(seed);
    const std::string text = scenario_toml(sc);
    const scenario back = read_scenario_text(text, "random.toml");
    BOOST_TEST(scenario_toml(back) == text, "seed " << seed);
    BOOST_TEST(scenario_toml(random_scenario(seed)) == text);  // the same seed, the same world
    texts.insert(text);
    for (const auto& e : sc.churn.events) kinds.insert(e.kind);
    kinds.insert(sc.workload.mode);
    if (sc.network.loss > 0) kinds.insert("loss");
    if (sc.model.experts > 0) kinds.insert("experts");
    if (sc.model.swarms > 1) kinds.insert("swarms");
  }
  BOOST_TEST(texts.size() == 300u);
  for (const char* k : {"crash", "leave", "freeze", "partition", "join", "slow", "restart", "relay", "push", "loss",
                        "experts", "swarms"})
    BOOST_TEST(kinds.count(k) == 1u, "no world drew " << k);
}

BOOST_AUTO_TEST_CASE(coverage_watch_reports_a_gap_once_it_outlasts_the_bound) {
  CoverageWatch w(100);
  BOOST_TEST(!w.observe(0, true, true));
  BOOST_TEST(!w.observe(10, true, false));   // a gap opens
  BOOST_TEST(!w.observe(110, true, false));  // 100 s: within the bound
  BOOST_TEST(!!w.observe(111, true, false));
  BOOST_TEST(!w.observe(150, true, false));   // reported once
  BOOST_TEST(!w.observe(160, true, true));    // closed
  BOOST_TEST(!w.observe(170, false, false));  // no spare capacity: no gap counts
  BOOST_TEST(!w.observe(400, false, false));
  BOOST_TEST(!w.observe(401, true, false));  // a new gap starts here
  BOOST_TEST(!w.observe(501, true, false));
  BOOST_TEST(!!w.observe(502, true, false));
}

BOOST_AUTO_TEST_CASE(spare_capacity_is_twice_the_model) {
  BOOST_TEST(spare_capacity({4, 4}, 4));
  BOOST_TEST(!spare_capacity({4, 3}, 4));
  BOOST_TEST(spare_capacity({8}, 4) == false);  // a span counts at most the model once
  BOOST_TEST(spare_capacity({2, 2, 2, 2}, 4));
  BOOST_TEST(!spare_capacity({}, 4));
}

BOOST_AUTO_TEST_CASE(a_random_world_replays_to_the_same_log) {
  // A world with faults: the replay must hold through crashes, freezes and partitions too.
  uint64_t seed = 1;
  while (random_scenario(seed).churn.events.size() < 3) ++seed;
  const scenario sc = random_scenario(seed);
  auto run = [&] {
    World w(sc, seed);
    w.run();
    return std::make_pair(w.log().text(), report_json(w.results()));
  };
  const auto a = run(), b = run();
  BOOST_TEST(a.first.size() > 1000);
  BOOST_TEST((a.first == b.first));
  BOOST_TEST((a.second == b.second));
}

BOOST_AUTO_TEST_CASE(servers_that_never_rebalance_break_block_coverage) {
  // Eight servers of 2 blocks over a 4-block model place themselves four on each half. Balance quality 0 never
  // moves a server, so when the four on blocks 2..3 crash, those blocks stay unserved although the other four
  // (twice the model between them) could serve them.
  scenario sc = read_scenario_text(R"(
duration_s = 1200
announce_period_s = 10
mean_balance_check_s = 30
balance_quality = 0
[model]
blocks = 4
hidden_size = 256
intermediate_size = 512
heads = 4
vocab_size = 500
[[servers]]
count = 8
num_blocks = 2
start_spread_s = 20
[workload]
sessions = 0
)",
                                   "stuck.toml");
  World probe(sc, 1);
  probe.run();
  // Crash whichever servers ended up on the last blocks.
  for (const auto& s : probe.results().servers)
    if (s.first_block == 2) sc.churn.events.push_back({100, "crash", std::stoll(s.address.substr(4)), "", 0, ""});
  BOOST_TEST_REQUIRE(sc.churn.events.size() == 4u);
  World w(sc, 1);
  w.run();
  const auto& v = w.results().violations;
  BOOST_TEST_REQUIRE(v.size() >= 1u);
  BOOST_TEST(v.front().invariant == "block-coverage");
  BOOST_TEST(v.front().actors.find("blocks 2,3") != std::string::npos, v.front().actors);
  BOOST_TEST(v.front().t_s > 100 + bounds_for(sc).cover_s);
  // The same world in a child process reports the same first failure, and shrinking keeps it broken.
  const world_outcome o = run_isolated(sc, 1, 300);
  BOOST_TEST(o.first_failure() == "block-coverage");
  BOOST_TEST(o.crash.empty());
  const scenario small = shrink(sc, 1, "block-coverage", 4, 300, nullptr);
  BOOST_TEST(small.server_count() <= sc.server_count());
  BOOST_TEST(small.churn.events.size() <= sc.churn.events.size());
  BOOST_TEST(run_isolated(small, 1, 300).first_failure() == "block-coverage");
}

BOOST_AUTO_TEST_CASE(servers_cut_off_for_a_while_are_found_in_the_dht_again) {
  // A frozen server evicts every contact it tries and is evicted by every node that tries it; a partition does
  // the same between two regions. Once healed, each side must meet the other again (random world 7 found a
  // swarm whose DHT stayed split for good after a freeze and a partition).
  const scenario sc = read_scenario_text(R"(
duration_s = 900
announce_period_s = 30
[model]
blocks = 8
hidden_size = 256
intermediate_size = 512
heads = 4
vocab_size = 500
[network]
regions = ["a", "b"]
[[network.latency]]
between = ["a", "b"]
one_way_ms = 20
[[servers]]
count = 3
region = "a"
num_blocks = 4
start_spread_s = 10
[[servers]]
count = 3
region = "b"
num_blocks = 4
start_s = 5
start_spread_s = 10
[workload]
sessions = 0
[churn]
[[churn.events]]
at_s = 100
kind = "freeze"
server = 1
duration_s = 120
[[churn.events]]
at_s = 300
kind = "partition"
region = "b"
duration_s = 120
)",
                                         "cut-off.toml");
  World w(sc, 1);
  w.run();
  for (const auto& v : w.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  BOOST_TEST(w.log().text().find("server-thaw") != std::string::npos);
  BOOST_TEST(w.log().text().find("partition-healed") != std::string::npos);
}

// Impostors announce copies of live servers' records under their own keys (the address kept, the span widened or
// not, a hundred times the throughput): clients that follow them are refused at the address (blocks it does not
// serve) or meet a server proving another key, charge the failure to the impostor's key and route round it. Every
// session completes and every invariant holds.
BOOST_AUTO_TEST_CASE(impostors_in_the_dht_cost_sessions_a_failover_at_most) {
  scenario sc = read_scenario(std::string(COROLLA_SCENARIO_DIR) + "/small.toml");
  sc.hostile.impostors = 2;
  sc.hostile.impostor_start_s = 5;
  sc.hostile.impostor_period_s = 10;
  World w(sc, sc.seed);
  w.run();
  for (const auto& v : w.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  BOOST_TEST(w.log().text().find("impostor-announce") != std::string::npos);
  size_t met = 0;
  for (const auto& s : w.results().sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    for (const auto& f : s.failures)
      if (f.find("unknown_block") != std::string::npos || f.find("does not hold the key") != std::string::npos) ++met;
  }
  BOOST_TEST(met > 0u);  // the sessions did follow impostors' records
}

// Impostors that also forge: every period they store, at the nodes nearest the swarm's key, forgeries of its
// servers' records under the servers' own subkeys (the payload widened and the expiry pushed later under the
// owner's signature, or signed by the impostor), and their own DHT nodes add such forgeries to every answer. No node
// stores one (forged-refused) and no reader believes one (dht-readable: a forgery expires later than the record it
// copies, so a reader taking it would list the server with the whole model). Both checks fail when a node or a
// reader skips the signature check.
BOOST_AUTO_TEST_CASE(forged_records_are_refused_by_every_node_and_reader) {
  scenario sc = read_scenario(std::string(COROLLA_SCENARIO_DIR) + "/small.toml");
  sc.hostile.impostors = 2;
  sc.hostile.impostor_start_s = 5;
  sc.hostile.impostor_period_s = 10;
  sc.hostile.forge = true;
  World w(sc, sc.seed);
  w.run();
  for (const auto& v : w.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  BOOST_TEST(w.log().text().find("impostor-forge") != std::string::npos);
  for (const auto& s : w.results().sessions) BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
}

// small.toml with `impostors` flooding `subkeys` subkeys of their own in every key of the swarm every 10 s from
// 1 s on, stored at the nodes nearest each key from before the servers start, and a server that joins at 60 s.
static scenario flooded_world(int impostors, int64_t subkeys) {
  scenario sc = read_scenario(std::string(COROLLA_SCENARIO_DIR) + "/small.toml");
  sc.hostile.impostors = impostors;
  sc.hostile.impostor_start_s = 1;
  sc.hostile.impostor_period_s = 10;
  sc.hostile.flood_subkeys = subkeys;
  churn_event join;
  join.at_s = 60;
  join.kind = "join";
  join.server_class = "small";
  sc.churn.events.push_back(join);
  return sc;
}

// A flood of valid records (keys cost nothing) from one impostor, 1024 subkeys in every key. Each node keeps only
// the impostor's quota (actors/dht/storage.hpp), so the servers that start meanwhile and the one that joins at 60 s
// are listed (dht-readable); with no quota, the flood fills the keys and two servers are never listed.
BOOST_AUTO_TEST_CASE(a_flood_of_records_leaves_the_servers_that_join_listed) {
  const scenario sc = flooded_world(1, 1024);
  World w(sc, sc.seed);
  w.run();
  for (const auto& v : w.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  BOOST_TEST(w.log().text().find("impostor-flood impostor-0 64 of 1024 held at srv-6") != std::string::npos);
  for (const auto& s : w.results().sessions) BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
}

// The flood from 17 impostors, each a node (an address) of its own, with its quota of 64 subkeys in every key:
// 1,088 records for each key's 1,024 places. A full key makes room for the servers' records by taking places from
// the impostors, which hold the most of it (storage.hpp), so every server is listed; with no such room, servers
// that start after the flood filled the keys are never listed (dht-readable).
BOOST_AUTO_TEST_CASE(a_flood_from_many_addresses_leaves_the_servers_that_join_listed) {
  scenario sc = flooded_world(17, 64);
  sc.log_steps = false;
  World w(sc, sc.seed);
  w.run();
  for (const auto& v : w.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  for (const auto& s : w.results().sessions) BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
}

// Training sessions over the swarm (forward and backward passes, split into sub-batches with routes of their own)
// while servers crash and leave under them: every pass completes, and every forward equals the whole model's
// blocks run in one process (session-output), which fails when a sub-batch comes back in the wrong rows or a
// replacement server computes from the wrong input.
BOOST_AUTO_TEST_CASE(training_sessions_survive_failures_with_the_fault_free_outputs) {
  scenario sc = read_scenario(std::string(COROLLA_SCENARIO_DIR) + "/small.toml");
  sc.check_outputs = true;
  sc.log_steps = false;
  auto& w = sc.workload;
  w.training_sessions = 3;
  w.training_steps = 60;
  w.training_batch = 2;
  w.training_tokens = 8;
  w.training_max_batch_tokens = 8;
  for (auto [at, kind, server] : {std::tuple{121.0, "crash", 0}, {123.0, "crash", 3}, {125.0, "leave", 1}}) {
    churn_event e;
    e.at_s = at;
    e.kind = kind;
    e.server = server;
    sc.churn.events.push_back(e);
  }
  World w_(sc, sc.seed);
  w_.run();
  for (const auto& v : w_.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  size_t training = 0;
  for (const auto& s : w_.results().sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    if (!s.training) continue;
    ++training;
    BOOST_TEST(s.token_s.size() == 60u);
    BOOST_TEST(s.token_s.front() < 121.0);  // running when the faults came
    BOOST_TEST(s.token_s.back() > 125.0);
  }
  BOOST_TEST(training == 3u);
}

// Servers' and clients' wall clocks off by up to an eighth of the announce period (what random worlds draw): every
// server stays listed and every session completes. Off by more than a record's life, a holder ahead of a signer
// takes its records for expired and readers miss live servers (clients too: their sessions find no server): the
// skew reaches the records' checks.
BOOST_AUTO_TEST_CASE(clocks_skewed_by_an_eighth_of_the_period_keep_every_server_listed) {
  scenario sc = read_scenario(std::string(COROLLA_SCENARIO_DIR) + "/small.toml");
  sc.log_steps = false;
  sc.network.clock_skew_s = sc.announce_period_s / 8;
  World within(sc, sc.seed);
  within.run();
  for (const auto& v : within.results().violations) BOOST_TEST(false, v.invariant << " " << v.actors << ": " << v.what);
  for (const auto& s : within.results().sessions) BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
  sc.network.clock_skew_s = 4 * sc.announce_period_s;
  World beyond(sc, sc.seed);
  beyond.run();
  size_t missed = 0, failed = 0;  // by servers reading the swarm; by clients' sessions finding no server
  for (const auto& v : beyond.results().violations) {
    missed += v.invariant == "dht-readable";
    failed += v.invariant == "session-outcome";
  }
  BOOST_TEST(missed > 0u);
  BOOST_TEST(failed > 0u);
}

BOOST_AUTO_TEST_CASE(worlds_that_found_bugs_keep_every_invariant) {
  size_t worlds = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(COROLLA_SCENARIO_DIR) + "/regressions")) {
    if (f.path().extension() != ".toml") continue;
    const scenario sc = read_scenario(f.path().string());
    World w(sc, sc.seed);
    w.run();
    for (const auto& v : w.results().violations)
      BOOST_TEST(false, f.path().filename().string()
                            << ": " << v.invariant << " at " << v.t_s << " s, " << v.actors << ": " << v.what);
    ++worlds;
  }
  BOOST_TEST(worlds >= 3u);
}

BOOST_AUTO_TEST_CASE(digests_make_a_model_output_depend_on_its_whole_input) {
  // session-output is only as strong as the cost model's digests: tokens must differ with the prompt, with a
  // token's position and with what the cache holds, and must not differ with how the input is split into steps.
  model_shape m;
  m.blocks = 3;
  m.hidden_size = 256;
  m.intermediate_size = 512;
  m.heads = 4;
  m.kv_heads = 2;
  m.vocab_size = 1000;
  auto source = std::make_shared<SyntheticWeights>(m.config(), m.dtype, "digests");
  auto backend = make_cost_backend({}, true);
  LocalModel model(source, *backend);
  GenerationParams params;
  params.max_new_tokens = 12;
  params.stop_at_eos = false;
  const std::vector<int32_t> a = {5, 6, 7, 8}, b = {5, 6, 7, 9};
  const auto ta = generate(model, a, params), tb = generate(model, b, params);
  BOOST_TEST(ta.size() == 12u);
  BOOST_TEST((ta != tb));
  BOOST_TEST(std::set<int32_t>(ta.begin(), ta.end()).size() > 6u);  // not one token over and over
  BOOST_TEST((generate(model, a, params) == ta));                   // deterministic
  // The prompt fed token by token (as a replay merged differently would) gives the same logits as all at once.
  auto last_logits = [&](const std::vector<int32_t>& ids, bool one_by_one) {
    model.reset(1, 64);
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) pos[i] = static_cast<int32_t>(i);
    Tensor logits;
    if (one_by_one)
      for (size_t i = 0; i < ids.size(); ++i) logits = model.forward({&ids[i], 1}, {&pos[i], 1}, true);
    else
      logits = model.forward(ids, pos, true);
    return std::vector<float>(logits.data_as<float>(), logits.data_as<float>() + logits.numel());
  };
  BOOST_TEST((last_logits(a, true) == last_logits(a, false)));
  // A token at another position, or a cache missing a step, changes the output.
  model.reset(1, 64);
  const std::vector<int32_t> p0 = {0, 1, 2, 3}, p1 = {0, 1, 2, 4};
  const Tensor x = model.forward(a, p0, true);
  const std::vector<float> at_p0(x.data_as<float>(), x.data_as<float>() + x.numel());
  model.reset(1, 64);
  const Tensor y = model.forward(a, p1, true);
  BOOST_TEST((at_p0 != std::vector<float>(y.data_as<float>(), y.data_as<float>() + y.numel())));
  model.reset(1, 64);
  model.forward({a.data(), 2}, {p0.data(), 2}, true);  // step 2 (tokens 2..3) without step 1's third token
  const Tensor z = model.forward({a.data() + 3, 1}, {p0.data() + 3, 1}, true);
  BOOST_TEST((at_p0 != std::vector<float>(z.data_as<float>(), z.data_as<float>() + z.numel())));
}
