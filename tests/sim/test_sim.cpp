// The deterministic swarm simulator: scenario files, the cost model, determinism (the same seed gives the same
// log and report, byte for byte; another seed differs), and failover under crashes and a freeze (every session
// completes).
#define BOOST_TEST_MODULE sim
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <map>
#include <optional>

#include "actors/config/config_error.hpp"
#include "actors/server/step_batcher.hpp"
#include "kernels/modelled_time.hpp"
#include "model/block.hpp"
#include "sim/cost_backend.hpp"
#include "sim/report.hpp"
#include "sim/scenario.hpp"
#include "sim/synthetic_weights.hpp"
#include "sim/virtual_tensor.hpp"
#include "sim/world.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::sim;

namespace {

std::string scenario_path(const std::string& name) { return std::string(COROLLA_SCENARIO_DIR) + "/" + name + ".toml"; }

std::string write(const corolla::test::TempDir& dir, const std::string& text) {
  const std::string path = dir.str() + "/s.toml";
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path) {
  try {
    read_scenario(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kMinimal = "[[servers]]\ncount = 2\nnum_blocks = 4\n";

// The modelled time of one decode step through block 0 of shape m (position 100), and its weight bytes.
double decode_seconds(const model_shape& m, const DeviceModel& device, int64_t& weight_bytes) {
  SyntheticWeights source(m.config(), m.dtype, "shape");
  CostBackend backend(device);
  auto block = load_block(source, 0, backend);
  weight_bytes = block->weight_bytes();
  KVCache cache = block->make_cache(1, 256);
  Tensor h = backend.alloc(DType::f32, {1, 1, m.hidden_size});
  std::vector<int32_t> pos{100};
  block->forward(h, pos, &cache);
  return std::chrono::duration<double>(backend.take_modelled_time()).count();
}

}  // namespace

BOOST_AUTO_TEST_CASE(scenario_errors_name_the_file_line_and_key) {
  corolla::test::TempDir dir;
  std::string path = write(dir, std::string("duration_s = 60\n") + kMinimal + "[workload]\nsesions = 3\n");
  std::string e = error_of(path);
  BOOST_TEST(e.find(path + ":6") != std::string::npos, e);
  BOOST_TEST(e.find("sesions") != std::string::npos, e);
  BOOST_TEST(e.find("sessions") != std::string::npos, e);  // the suggestion
  path = write(dir, std::string(kMinimal) + "region = \"mars\"\n");
  e = error_of(path);
  BOOST_TEST(e.find("mars") != std::string::npos, e);
  path = write(dir, "[model]\nheads = 7\n");
  BOOST_TEST(error_of(path).find("heads") != std::string::npos, error_of(path));
  BOOST_CHECK_NO_THROW(read_scenario(scenario_path("small")));
  BOOST_CHECK_NO_THROW(read_scenario(scenario_path("petals-paper")));
  BOOST_CHECK_NO_THROW(read_scenario(scenario_path("churn")));
  BOOST_CHECK_NO_THROW(read_scenario(scenario_path("scale")));
}

// A block of a BLOOM-176B-sized shape loads and runs on the cost backend without memory for its weights or cache,
// and a decode step costs what the roofline says: its weight bytes over the memory bandwidth, plus overheads.
BOOST_AUTO_TEST_CASE(cost_backend_models_a_big_block_without_memory) {
  model_shape m;
  m.blocks = 70;
  m.hidden_size = 14336;
  m.intermediate_size = 38229;
  m.heads = 112;
  m.kv_heads = 112;
  m.vocab_size = 250880;
  m.dtype = DType::q8_0;
  SyntheticWeights source(m.config(), m.dtype, "bloom-shaped");
  DeviceModel device{312e12, 2e12, 0};
  CostBackend backend(device);
  auto block = load_block(source, 69, backend);
  BOOST_TEST(block->weight_bytes() > int64_t{2} << 30);  // gigabytes of weights, none of them allocated
  KVCache cache = block->make_cache(1, 2048);
  BOOST_TEST(is_virtual(cache.pages().k));
  Tensor h = backend.alloc(DType::f32, {1, 1, m.hidden_size});
  std::vector<int32_t> pos{100};
  block->forward(h, pos, &cache);
  const double t = std::chrono::duration<double>(backend.take_modelled_time()).count();
  const double weights_s = static_cast<double>(block->weight_bytes()) / device.bytes_per_second;
  BOOST_TEST(t >= weights_s);
  BOOST_TEST(t < weights_s * 1.05);
  BOOST_TEST(backend.take_modelled_time().count() == 0);  // taken
  // A prefill of 128 tokens is compute-bound: 2 FLOP per weight per token.
  Tensor p = backend.alloc(DType::f32, {1, 128, m.hidden_size});
  std::vector<int32_t> ps(128);
  for (int i = 0; i < 128; ++i) ps[static_cast<size_t>(i)] = i;
  block->forward(p, ps, &cache);
  const double tp = std::chrono::duration<double>(backend.take_modelled_time()).count();
  BOOST_TEST(tp > 2.0 * 128 * m.block_bytes() / 1.0625 / device.flops * 0.9);
  // A working copy is another virtual tensor: nothing is allocated for it.
  BOOST_TEST(is_virtual(backend.copy(p)));
}

// A server's step batcher assembles batches and gathers chunked prompts' outputs in memory its backend gives: on the
// cost model (no digests) every such tensor is virtual, so a simulated swarm's prompts cost no memory however long
// they are, and with digests they are real and carry each chunk's rows to their places. Either way a batch's input
// is host memory, whose upload to the device is charged.
BOOST_AUTO_TEST_CASE(the_step_batcher_assembles_in_the_cost_models_memory) {
  const int64_t d = 8192;
  for (const bool digests : {false, true}) {
    CostBackend backend(DeviceModel{}, digests);
    StepBatcher batcher(16, backend);
    Tensor prompt = backend.alloc(DType::f32, {1, 40, d});  // 40 tokens in chunks of 16, 16, 8
    if (digests)
      for (int64_t r = 0; r < 40; ++r) prompt.data_as<float>()[r * d] = static_cast<float>(r + 1);
    std::optional<caf::expected<Tensor>> out;
    std::vector<int32_t> positions(40);
    for (int32_t i = 0; i < 40; ++i) positions[static_cast<size_t>(i)] = i;
    batcher.push({0, 1}, 1, "", prompt, positions, [&](caf::expected<Tensor> t) { out = std::move(t); }, {});
    int batches = 0;
    while (auto b = batcher.start({0, 1}, {})) {
      BOOST_TEST(is_virtual(b->msg.hidden) == !digests);
      BOOST_TEST(is_virtual_host(b->msg.hidden) == !digests);
      backend.take_modelled_time();
      const Tensor on_device = backend.upload(b->msg.hidden);
      BOOST_TEST(backend.take_modelled_time().count() > 0);
      BOOST_TEST(!is_virtual_host(on_device));
      ++batches;
      batcher.finish(b->id, std::move(b->msg), {});  // the blocks as an identity
    }
    BOOST_TEST(batches == 3);
    BOOST_REQUIRE((out && *out));
    BOOST_TEST(((*out)->shape() == Shape{1, 40, d}));
    BOOST_TEST(is_virtual(**out) == !digests);
    if (digests)
      for (int64_t r = 0; r < 40; ++r) BOOST_TEST((*out)->data_as<const float>()[r * d] == static_cast<float>(r + 1));
  }
}

// A Mixtral-shaped block (8 experts, top-2) holds every expert but a decode step reads only the chosen two: its
// modelled time is that of a dense block of the active size, a quarter of what reading all experts would cost.
BOOST_AUTO_TEST_CASE(cost_backend_prices_a_mixture_of_experts_by_its_active_experts) {
  model_shape moe;
  moe.hidden_size = 4096;
  moe.intermediate_size = 14336;
  moe.heads = 32;
  moe.kv_heads = 8;
  moe.experts = 8;
  moe.experts_per_token = 2;
  model_shape dense = moe;  // the same attention, one MLP of the two experts' width
  dense.experts = 0;
  dense.intermediate_size = 2 * moe.intermediate_size;
  DeviceModel device{312e12, 2e12, 0};
  int64_t moe_bytes = 0, dense_bytes = 0;
  const double moe_s = decode_seconds(moe, device, moe_bytes), dense_s = decode_seconds(dense, device, dense_bytes);
  BOOST_TEST(static_cast<double>(moe_bytes) == moe.block_bytes(), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(moe_bytes > 3 * dense_bytes);  // all eight experts are held
  BOOST_TEST(moe_s / dense_s > 0.98);       // but a token reads two of them
  BOOST_TEST(moe_s / dense_s < 1.05);
  BOOST_TEST(moe_s < 0.4 * static_cast<double>(moe_bytes) / device.bytes_per_second);
}

// K-quant weights are priced by their bytes: a decode step of a q4_K block (144 bytes per 256 weights) costs what
// its bytes take to read, about 0.53 of the same block in q8_0 (34 bytes per 32). A shape whose rows are not whole
// super-blocks is refused by the scenario reader.
BOOST_AUTO_TEST_CASE(cost_backend_prices_k_quants_by_their_bytes) {
  model_shape m;
  m.hidden_size = 4096;
  m.intermediate_size = 11008;
  m.heads = 32;
  m.kv_heads = 32;
  DeviceModel device{312e12, 2e12, 0};
  model_shape q8 = m;
  m.dtype = DType::q4_K;
  q8.dtype = DType::q8_0;
  int64_t q4k_bytes = 0, q8_bytes = 0;
  const double q4k_s = decode_seconds(m, device, q4k_bytes), q8_s = decode_seconds(q8, device, q8_bytes);
  BOOST_TEST(static_cast<double>(q4k_bytes) / static_cast<double>(q8_bytes) < 0.54);
  BOOST_TEST(q4k_s >= static_cast<double>(q4k_bytes) / device.bytes_per_second);
  BOOST_TEST(q4k_s / q8_s < 0.56);
  corolla::test::TempDir dir;
  const std::string path =
      write(dir, std::string(kMinimal) + "[model]\nhidden_size = 4000\nheads = 20\ndtype = \"q4_K\"\n");
  BOOST_TEST(error_of(path).find("whole blocks of 256") != std::string::npos, error_of(path));
}

// A query of a sliding-window layer reads only its window of the history: a long session's decode step costs
// what a short one does once the history passes the window.
BOOST_AUTO_TEST_CASE(cost_backend_prices_attention_over_the_window_only) {
  CostBackend backend(DeviceModel{1e15, 1e12, 0});
  const int64_t heads = 32, kv_heads = 8, head_dim = 128, context = 32768;
  Tensor q = backend.alloc(DType::f32, {1, 1, heads, head_dim});
  Tensor k = backend.alloc(DType::f32, {1, context, kv_heads, head_dim});
  Tensor out = backend.alloc(DType::f32, {1, 1, heads, head_dim});
  ContiguousKv cache(k, k);
  auto step_s = [&](int32_t position, int64_t window) {
    AttentionSpec spec{1.0f, window, 0};
    std::vector<int32_t> pos{position};
    backend.attention(q, cache.pages(), pos, spec, out);
    return std::chrono::duration<double>(backend.take_modelled_time()).count();
  };
  const double full_long = step_s(30000, 0), window_long = step_s(30000, 4096), window_short = step_s(4095, 4096);
  BOOST_TEST(window_long == window_short, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(full_long > 7 * window_long);
}

// The device runs one thing at a time: work queued while it is busy starts when the earlier work ends.
BOOST_AUTO_TEST_CASE(modelled_work_queues_on_the_device) {
  model_shape m;
  SyntheticWeights source(m.config(), m.dtype, "queue");
  CostBackend backend(DeviceModel{100e12, 1e12, 0});
  auto block = load_block(source, 0, backend);
  Tensor h = backend.alloc(DType::f32, {1, 1, m.hidden_size});
  std::vector<int32_t> pos{0};
  block->forward(h, pos, nullptr);
  const auto cost = backend.take_modelled_time();
  BOOST_REQUIRE(cost.count() > 0);
  const ModelledTime::time_point t0{std::chrono::seconds(100)};
  block->forward(h, pos, nullptr);
  const auto first = modelled_end(backend, t0);
  block->forward(h, pos, nullptr);
  const auto second = modelled_end(backend, t0);  // asked for at the same time: waits for the first
  BOOST_REQUIRE(first && second);
  BOOST_TEST((*first == t0 + cost));
  BOOST_TEST((*second == t0 + 2 * cost));
  block->forward(h, pos, nullptr);
  const auto later = modelled_end(backend, t0 + 10 * cost);  // an idle device starts at once
  BOOST_TEST((*later == t0 + 11 * cost));
}

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_log_and_report) {
  const scenario sc = read_scenario(scenario_path("small"));
  auto run = [&](uint64_t seed) {
    World w(sc, seed);
    w.run();
    return std::make_pair(w.log().text(), report_json(w.results()) + report_html(w.results()));
  };
  const auto a = run(7), b = run(7), c = run(8);
  BOOST_TEST(a.first.size() > 1000);
  BOOST_TEST((a.first == b.first));
  BOOST_TEST((a.second == b.second));
  BOOST_TEST((a.first != c.first));
  World w(sc, 7);
  w.run();
  size_t ok = 0;
  for (const auto& s : w.results().sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    ok += s.ok;
    BOOST_TEST(s.token_s.size() == static_cast<size_t>(s.new_tokens));
    BOOST_TEST(s.steps_per_s() > 0);
  }
  BOOST_TEST(ok == sc.workload.sessions);
  BOOST_TEST(w.results().traffic.messages.at("dht") > 0);
  BOOST_TEST(w.results().traffic.messages.at("step") > 0);
}

BOOST_AUTO_TEST_CASE(sessions_survive_crashes_and_a_freeze) {
  const scenario sc = read_scenario(scenario_path("small-churn"));
  World w(sc, sc.seed);
  w.run();
  const auto& r = w.results();
  size_t failovers = 0, crashed = 0;
  for (const auto& s : r.sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    BOOST_TEST(s.token_s.size() == static_cast<size_t>(s.new_tokens));
    failovers += s.recovery_s.size();
  }
  for (const auto& s : r.servers) crashed += s.fate == "crashed";
  BOOST_TEST(crashed == 2u);
  BOOST_TEST(failovers > 0u);
  BOOST_TEST(w.log().text().find("server-crash") != std::string::npos);
}

// Push mode crosses the simulated network too: each gate's output copy goes to the session through a link back
// (the sender a gate sees), and failover works from those copies.
BOOST_AUTO_TEST_CASE(push_routes_run_and_fail_over) {
  scenario sc = read_scenario(scenario_path("small-churn"));
  sc.workload.mode = "push";
  World w(sc, sc.seed);
  w.run();
  size_t failovers = 0;
  for (const auto& s : w.results().sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    BOOST_TEST(s.token_s.size() == static_cast<size_t>(s.new_tokens));
    failovers += s.recovery_s.size();
  }
  BOOST_TEST(failovers > 0u);
}

// Two models on one DHT: each swarm's servers cover its blocks and its clients' sessions run through them only.
BOOST_AUTO_TEST_CASE(several_swarms_share_one_dht) {
  scenario sc = read_scenario(scenario_path("small"));
  sc.model.swarms = 2;
  for (auto& cls : sc.servers) cls.count *= 2;
  sc.workload.clients = 4;
  World w(sc, sc.seed);
  w.run();
  const auto& r = w.results();
  std::map<std::string, size_t> per_swarm;
  for (const auto& s : r.servers) ++per_swarm[s.swarm];
  BOOST_TEST(per_swarm.size() == 2u);
  BOOST_TEST(per_swarm["sim-0"] == 6u);
  BOOST_TEST(per_swarm["sim-1"] == 6u);
  BOOST_REQUIRE(!r.samples.empty());
  for (int64_t n : r.samples.back().block_servers) BOOST_TEST(n >= 1);  // the weakest swarm covers every block
  for (const auto& s : r.sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    BOOST_TEST(s.token_s.size() == static_cast<size_t>(s.new_tokens));
  }
  BOOST_TEST(w.log().text().find("session-done") != std::string::npos);
}

// Lost messages: requests time out at their requesters (the DHT's RPCs, sessions' steps) and are tried again, so
// every session still completes.
BOOST_AUTO_TEST_CASE(sessions_complete_over_a_lossy_network) {
  scenario sc = read_scenario(scenario_path("small"));
  sc.network.loss = 0.02;
  World w(sc, sc.seed);
  w.run();
  const auto& r = w.results();
  BOOST_TEST(r.traffic.lost.size() > 0u);
  for (const auto& s : r.sessions) {
    BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
    BOOST_TEST(s.token_s.size() == static_cast<size_t>(s.new_tokens));
  }
}

// Continuous batching in the simulated swarm: sixteen sessions decoding at once on one memory-bound server. With
// batching the server reads each block's weights once for all their steps (the cost model prices a batched step
// as one read of the weights and the compute of every token), so the sessions together decode several times
// faster than when each step runs alone (max_batch_tokens = 0), and every session still completes.
BOOST_AUTO_TEST_CASE(a_server_batches_concurrent_sessions_steps) {
  corolla::test::TempDir dir;
  auto aggregate_tokens_per_s = [&](int64_t max_batch_tokens) {
    const scenario sc = read_scenario(write(dir, R"(
name = "batching"
duration_s = 600
[model]
blocks = 8
hidden_size = 1024
intermediate_size = 2816
heads = 16
vocab_size = 2000
dtype = "f16"
[[servers]]
count = 1
tflops = 50
memory_bandwidth_gbs = 50
num_blocks = 8
cache_tokens = 8192
max_batch_tokens = )" + std::to_string(max_batch_tokens) +
                                                     R"(
[workload]
clients = 4
sessions = 16
arrival_rate_per_s = 0
start_s = 60
prompt_tokens = 16
new_tokens = 32
max_length = 64
)"));
    World w(sc, 1);
    w.run();
    double first = 1e30, last = 0;
    int64_t tokens = 0;
    for (const auto& s : w.results().sessions) {
      BOOST_TEST(s.ok, "session " << s.id << ": " << s.error);
      if (!s.ok) continue;
      first = std::min(first, s.first_token_s);
      last = std::max(last, s.done_s);
      tokens += s.new_tokens - 1;
    }
    return last > first ? static_cast<double>(tokens) / (last - first) : 0.0;
  };
  const double alone = aggregate_tokens_per_s(0), batched = aggregate_tokens_per_s(256);
  BOOST_TEST_MESSAGE("16 sessions: " << alone << " tokens/s with each step alone, " << batched << " batched");
  BOOST_TEST(alone > 0);
  BOOST_TEST(batched > 4 * alone, batched << " tokens/s batched against " << alone << " alone");
}
