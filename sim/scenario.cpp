#include "sim/scenario.hpp"

#include <limits>

#include "actors/config/config_file.hpp"

namespace corolla::sim {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();

// A sub-table (`[name]`), or nullptr when absent; an error when it is something else.
const toml::table* table_at(TableReader& r, const char* key) {
  const toml::node* n = r.get_node(key);
  if (!n) return nullptr;
  if (!n->is_table()) r.fail(key, "must be a table, written [" + r.prefix() + key + "], got " + describe_value(*n));
  return n->as_table();
}

// The tables of an array of tables (`[[name]]`); an error when it is something else.
std::vector<const toml::table*> tables_at(TableReader& r, const char* key) {
  std::vector<const toml::table*> out;
  const toml::node* n = r.get_node(key);
  if (!n) return out;
  if (!n->is_array_of_tables())
    r.fail(key, "must be an array of tables, written [[" + r.prefix() + key + "]], got " + describe_value(*n));
  for (const toml::node& t : *n->as_array()) out.push_back(t.as_table());
  return out;
}

void read_model(TableReader& r, model_shape& m) {
  r.get_int("blocks", m.blocks, 1, 100000);
  r.get_int("hidden_size", m.hidden_size, 2, 1 << 20);
  r.get_int("intermediate_size", m.intermediate_size, 1, 1 << 22);
  r.get_int("heads", m.heads, 1, 4096);
  m.kv_heads = m.heads;
  r.get_int("kv_heads", m.kv_heads, 1, 4096);
  r.get_int("vocab_size", m.vocab_size, 1, 1 << 24);
  r.get_int("experts", m.experts, 0, 1024);
  r.get_int("experts_per_token", m.experts_per_token, 1, 1024);
  if (m.experts > 0 && m.experts_per_token > m.experts) r.fail("experts_per_token", "must not exceed experts");
  r.get_int("swarms", m.swarms, 1, 100000);
  std::string dtype;
  if (r.get_string("dtype", dtype)) {
    auto d = parse_dtype(dtype);
    if (!d || *d == DType::i32 || *d == DType::i64)
      r.fail("dtype", "must be one of " + weight_dtype_list() + ", got \"" + dtype + "\"");
    m.dtype = *d;
  }
  // Every weight matrix has hidden_size as a dimension, so its values then fill whole blocks (what pricing counts).
  if (m.hidden_size % block_elems(m.dtype) != 0)
    r.fail("dtype", std::string(dtype_name(m.dtype)) + " weights need a hidden_size in whole blocks of " +
                        std::to_string(block_elems(m.dtype)) + " values");
  if (m.hidden_size % m.heads != 0 || (m.hidden_size / m.heads) % 2 != 0)
    r.fail("heads", "must divide hidden_size into heads of an even size");
  if (m.heads % m.kv_heads != 0) r.fail("kv_heads", "must divide heads");
}

void read_network(TableReader& r, network_model& n) {
  std::vector<std::string> names;
  r.get_string_array("regions", names);
  for (auto& name : names) n.regions.push_back({name});
  r.get_double("local_ms", n.local_ms, 0, false);
  r.get_double("bandwidth_mbps", n.bandwidth_mbps, 0, true);
  r.get_double("loss", n.loss, 0, false);
  if (n.loss >= 1) r.fail("loss", "must be below 1");
  r.get_double("connection_timeout_s", n.connection_timeout_s, 0, true);
  r.get_double("clock_skew_s", n.clock_skew_s, 0, false);
  r.get_double("signature_check_us", n.signature_check_us, 0, false);
  size_t i = 0;
  for (const toml::table* t : tables_at(r, "latency")) {
    TableReader lr(*t, r.source(), "network.latency[" + std::to_string(i++) + "].");
    std::vector<std::string> between;
    if (!lr.get_string_array("between", between) || between.size() != 2)
      lr.fail("between", "must name two regions, as between = [\"eu\", \"us\"]");
    region_latency l{between[0], between[1], 0};
    if (!lr.get_double("one_way_ms", l.one_way_ms, 0, false)) lr.fail("one_way_ms", "is required");
    lr.finish();
    n.latencies.push_back(l);
  }
}

void read_server(TableReader& r, server_class& s) {
  r.get_string("name", s.name);
  r.get_int("count", s.count, 0, 1000000);
  r.get_string("region", s.region);
  r.get_double("tflops", s.tflops, 0, true);
  r.get_double("memory_bandwidth_gbs", s.memory_bandwidth_gbs, 0, true);
  r.get_double("op_overhead_us", s.op_overhead_us, 0, false);
  r.get_double("efficiency", s.efficiency, 0, true);
  if (s.efficiency > 1) r.fail("efficiency", "must be at most 1 (the roofline)");
  r.get_double("jitter", s.jitter, 0, false);
  if (s.jitter >= 1) r.fail("jitter", "must be below 1");
  r.get_double("memory_gb", s.memory_gb, 0, false);
  r.get_int("num_blocks", s.num_blocks, 0, 100000);
  r.get_int("cache_tokens", s.cache_tokens, 0, kMaxInt);
  r.get_int("max_batch_tokens", s.max_batch_tokens, 0, kMaxInt);
  r.get_double("bandwidth_mbps", s.bandwidth_mbps, 0, false);
  r.get_double("start_s", s.start_s, 0, false);
  r.get_double("start_spread_s", s.start_spread_s, 0, false);
  r.get_double("wrong_outputs", s.wrong_outputs, 0, false);
  if (s.wrong_outputs > 1) r.fail("wrong_outputs", "must be at most 1 (every step)");
  if (s.num_blocks == 0 && s.memory_gb == 0) r.fail("num_blocks", "or memory_gb must be set");
}

void read_workload(TableReader& r, client_workload& w) {
  r.get_int("clients", w.clients, 1, 1000000);
  r.get_string_array("regions", w.regions);
  r.get_int("sessions", w.sessions, 0, kMaxInt);
  r.get_double("arrival_rate_per_s", w.arrival_rate_per_s, 0, false);
  r.get_double("start_s", w.start_s, 0, false);
  r.get_int("prompt_tokens", w.prompt_tokens, 1, 1 << 20);
  r.get_int("prompt_tokens_max", w.prompt_tokens_max, 0, 1 << 20);
  r.get_int("new_tokens", w.new_tokens, 1, 1 << 20);
  r.get_int("new_tokens_max", w.new_tokens_max, 0, 1 << 20);
  r.get_int("max_length", w.max_length, 1, 1 << 20);
  if (r.get_string("mode", w.mode) && w.mode != "relay" && w.mode != "push")
    r.fail("mode", "must be \"relay\" or \"push\", got \"" + w.mode + "\"");
  r.get_double("request_timeout_s", w.request_timeout_s, 0, true);
  r.get_double("recovery_timeout_s", w.recovery_timeout_s, 0, true);
  r.get_int("spot_check_every", w.spot_check_every, 0, 1 << 30);
  r.get_int("training_sessions", w.training_sessions, 0, kMaxInt);
  r.get_int("training_steps", w.training_steps, 1, 1 << 20);
  r.get_int("training_batch", w.training_batch, 1, 1 << 10);
  r.get_int("training_tokens", w.training_tokens, 1, 1 << 16);
  r.get_int("training_max_batch_tokens", w.training_max_batch_tokens, 1, 1 << 30);
  const int64_t longest = std::max(w.prompt_tokens, w.prompt_tokens_max) + std::max(w.new_tokens, w.new_tokens_max);
  if (longest > w.max_length)
    r.fail("max_length", "must hold the longest prompt and generation (" + std::to_string(longest) + " tokens)");
}

void read_churn(TableReader& r, churn_model& c) {
  r.get_double("crash_fraction", c.crash_fraction, 0, false);
  r.get_double("leave_fraction", c.leave_fraction, 0, false);
  r.get_double("freeze_fraction", c.freeze_fraction, 0, false);
  if (c.crash_fraction + c.leave_fraction + c.freeze_fraction > 1)
    r.fail("crash_fraction", "plus leave_fraction and freeze_fraction must not exceed 1");
  r.get_double("freeze_s", c.freeze_s, 0, false);
  r.get_double("start_s", c.start_s, 0, false);
  r.get_double("within_s", c.within_s, 0, true);
  size_t i = 0;
  for (const toml::table* t : tables_at(r, "events")) {
    TableReader er(*t, r.source(), "churn.events[" + std::to_string(i++) + "].");
    churn_event e;
    if (!er.get_double("at_s", e.at_s, 0, false)) er.fail("at_s", "is required");
    if (!er.get_string("kind", e.kind)) er.fail("kind", "is required");
    if (e.kind != "crash" && e.kind != "leave" && e.kind != "freeze" && e.kind != "partition" && e.kind != "join" &&
        e.kind != "slow" && e.kind != "restart")
      er.fail("kind", "must be crash, leave, freeze, partition, join, slow or restart, got \"" + e.kind + "\"");
    er.get_int("server", e.server, -1, kMaxInt);
    er.get_string("region", e.region);
    er.get_double("duration_s", e.duration_s, 0, false);
    er.get_string("class", e.server_class);
    er.get_double("latency_ms", e.latency_ms, 0, false);
    if (e.kind == "slow" && e.latency_ms <= 0) er.fail("latency_ms", "must be positive for a slow");
    if (e.kind == "partition" && e.region.empty()) er.fail("region", "is required for a partition");
    if (e.kind == "join" && e.server_class.empty()) er.fail("class", "is required for a join");
    if ((e.kind == "freeze" || e.kind == "partition" || e.kind == "slow") && e.duration_s <= 0)
      er.fail("duration_s", "must be positive for a " + e.kind);
    er.finish();
    c.events.push_back(e);
  }
}

}  // namespace

ModelConfig model_shape::config() const {
  ModelConfig c;
  c.arch = experts > 0 ? "mixtral" : "llama";
  c.num_experts = experts;
  c.experts_per_token = experts > 0 ? experts_per_token : 0;
  c.vocab_size = vocab_size;
  c.hidden_size = hidden_size;
  c.intermediate_size = intermediate_size;
  c.num_layers = blocks;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden_size / heads;
  c.max_position = 1 << 20;
  c.tie_word_embeddings = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {static_cast<int32_t>(vocab_size - 1)};
  return c;
}

double model_shape::block_bytes() const {
  const int64_t d = hidden_size, hd = hidden_size / heads, kv = kv_heads * hd;
  const int64_t mlps = experts > 0 ? experts : 1;
  const int64_t matrices = 2 * d * d + 2 * kv * d + mlps * 3 * intermediate_size * d;
  // the norms, and the router (kept in f32, as the block loads it)
  return static_cast<double>(storage_bytes(dtype, matrices)) + 8.0 * static_cast<double>(d) +
         4.0 * static_cast<double>(experts * d);
}

int64_t scenario::server_count() const {
  int64_t n = 0;
  for (const auto& s : servers) n += s.count;
  return n;
}

const region* scenario::find_region(const std::string& name) const {
  for (const auto& r : network.regions)
    if (r.name == name) return &r;
  return nullptr;
}

scenario read_scenario(const std::string& path) { return read_scenario_text(read_config_file(path), path); }

scenario read_scenario_text(std::string_view text, const std::string& path) {
  const toml::table table = parse_config_text(text, path);
  TableReader top(table, path);
  scenario s;
  s.source = path;
  s.name = path;
  top.get_string("name", s.name);
  int64_t seed = 1;
  if (top.get_int("seed", seed, 0, kMaxInt)) s.seed = static_cast<uint64_t>(seed);
  top.get_double("duration_s", s.duration_s, 0, true);
  top.get_double("announce_period_s", s.announce_period_s, 0, true);
  top.get_double("mean_balance_check_s", s.mean_balance_check_s, 0, true);
  top.get_double("balance_quality", s.balance_quality, 0, false);
  top.get_bool("log_steps", s.log_steps);
  top.get_bool("check_outputs", s.check_outputs);
  if (const toml::table* t = table_at(top, "model")) {
    TableReader r(*t, path, "model.");
    read_model(r, s.model);
    r.finish();
    // The simulated model obeys the same rules as a real model's config (its synthetic weights check them too).
    try {
      s.model.config().validate("[model]");
    } catch (const std::runtime_error& e) {
      throw ConfigError(where(path, t) + e.what());
    }
  }
  if (const toml::table* t = table_at(top, "network")) {
    TableReader r(*t, path, "network.");
    read_network(r, s.network);
    r.finish();
  }
  if (s.network.regions.empty()) s.network.regions.push_back({"local"});
  size_t i = 0;
  const auto server_tables = tables_at(top, "servers");
  for (const toml::table* t : server_tables) {
    TableReader r(*t, path, "servers[" + std::to_string(i++) + "].");
    server_class c;
    c.region = s.network.regions.front().name;
    read_server(r, c);
    r.finish();
    if (!s.find_region(c.region)) r.fail("region", "names no region of [network] regions: \"" + c.region + "\"");
    s.servers.push_back(c);
  }
  if (const toml::table* t = table_at(top, "workload")) {
    TableReader r(*t, path, "workload.");
    read_workload(r, s.workload);
    r.finish();
    for (const auto& name : s.workload.regions)
      if (!s.find_region(name)) r.fail("regions", "names no region of [network] regions: \"" + name + "\"");
  }
  if (s.workload.regions.empty()) s.workload.regions.push_back(s.network.regions.front().name);
  if (const toml::table* t = table_at(top, "churn")) {
    TableReader r(*t, path, "churn.");
    read_churn(r, s.churn);
    r.finish();
    for (const auto& e : s.churn.events)
      if (!e.region.empty() && !s.find_region(e.region))
        r.fail("events", "a partition names no region of [network] regions: \"" + e.region + "\"");
  }
  if (const toml::table* t = table_at(top, "hostile")) {
    TableReader r(*t, path, "hostile.");
    r.get_int("impostors", s.hostile.impostors, 0, 1000);
    r.get_double("impostor_start_s", s.hostile.impostor_start_s, 0, false);
    r.get_double("impostor_period_s", s.hostile.impostor_period_s, 0, true);
    r.get_bool("forge", s.hostile.forge);
    r.get_int("flood_subkeys", s.hostile.flood_subkeys, 0, 4096);
    r.finish();
  }
  top.finish();
  if (s.check_outputs && (s.model.hidden_size / s.model.heads) % 16 != 0)
    top.fail("check_outputs", "needs heads of a multiple of 16 values (the digests' groups, sim/cost_backend.cpp)");
  if (s.servers.empty()) top.fail("servers", "at least one [[servers]] class is required");
  for (const auto& l : s.network.latencies)
    if (!s.find_region(l.a) || !s.find_region(l.b))
      top.fail("network", "a latency names an unknown region (\"" + l.a + "\", \"" + l.b + "\")");
  return s;
}

}  // namespace corolla::sim
