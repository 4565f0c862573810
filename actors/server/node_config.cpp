#include "actors/server/node_config.hpp"

#include <optional>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "actors/net/peer_limits.hpp"
#include "actors/protocol/block_span.hpp"
#include "actors/server/peer_quotas.hpp"
#include "actors/server/node_config_toml.hpp"
#include "model/model_path.hpp"

namespace corolla {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxThreads = 4096;
constexpr int64_t kMaxPeerConnections = 1000000;
constexpr int64_t kMaxPeerFrameMb = 4095;  // a BASP frame's length is 32 bits

std::string home_dir() {
  const char* home = std::getenv("HOME");
  return home && *home ? home : ".";
}

std::string expand_home(const std::string& path) {
  if (path == "~") return home_dir();
  if (path.rfind("~/", 0) == 0) return home_dir() + path.substr(1);
  return path;
}

std::string cache_dir() { return corolla_cache_dir(); }

std::optional<std::string> check_host(const std::string& host) {
  if (host.empty()) return std::string("must not be empty");
  for (unsigned char c : host)
    if (std::isspace(c) || std::iscntrl(c) || c == '/')
      return "must be a host name or an IP address, got " + toml_quote(host);
  return std::nullopt;
}

// Adapters are named by their directory: two with one name could not be told apart.
std::optional<std::string> check_adapters(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const auto& d : dirs) {
    std::string trimmed = d;
    while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
    const std::string name = trimmed.substr(trimmed.find_last_of('/') + 1);
    if (name.empty() || name == "." || name == "..")
      return "must be adapter directories with a name, got " + toml_quote(d);
    for (const auto& n : names)
      if (n == name) return "name two adapters '" + name + "' (requests name an adapter by its directory's name)";
    names.push_back(name);
  }
  return std::nullopt;
}

}  // namespace

std::string node_data_dir(const NodeConfig& config) {
  if (!config.data_dir.empty()) return expand_home(config.data_dir);
  std::string name = config.public_name.empty() ? "default" : config.public_name;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  return cache_dir() + "/node-" + name;
}

void read_node_keys(TableReader& r, NodeConfig& c) {
  if (r.get_string("model", c.model) && c.model.empty())
    r.fail("model", "must not be empty: give a model directory, a .gguf file or \"demo\"");

  int64_t num_blocks = 0;
  const bool has_num = r.get_int("num_blocks", num_blocks, 1, kMaxInt);
  std::string range;
  const bool has_range = r.get_string("block_indices", range);
  if (has_num && has_range)
    r.fail("block_indices", "and '" + r.prefix() + "num_blocks' exclude each other: give one of them");
  if (has_num) {
    c.num_blocks = static_cast<int>(num_blocks);
    c.block_indices.reset();
  }
  if (has_range) {
    int64_t first = 0, last = 0;
    if (auto problem = parse_block_range(range, first, last)) r.fail("block_indices", *problem);
    c.block_indices = BlockRange{static_cast<int>(first), static_cast<int>(last)};
    c.num_blocks.reset();
  }

  if (r.get_string("host", c.host))
    if (auto problem = check_host(c.host)) r.fail("host", *problem);
  int64_t port = 0;
  if (r.get_int("port", port, 0, 65535)) c.port = static_cast<uint16_t>(port);
  if (r.get_string("announce_address", c.announce_address) && !c.announce_address.empty())
    if (auto problem = check_peer_address(c.announce_address)) r.fail("announce_address", *problem);

  std::vector<std::string> peers;
  const bool has_peers = r.get_string_array("initial_peers", peers);
  for (size_t i = 0; i < peers.size(); ++i)
    if (auto problem = check_peer_address(peers[i]))
      r.fail("initial_peers", *problem, r.get_node("initial_peers")->as_array()->get(i));
  bool new_swarm = false;
  const bool has_new_swarm = r.get_bool("new_swarm", new_swarm);
  if (has_peers && !peers.empty() && has_new_swarm && new_swarm)
    r.fail("new_swarm", "and '" + r.prefix() + "initial_peers' exclude each other: a new swarm has no initial peers");
  if (has_peers) {
    c.initial_peers = std::move(peers);
    if (!c.initial_peers.empty()) c.new_swarm = false;
  }
  if (has_new_swarm) {
    c.new_swarm = new_swarm;
    if (new_swarm) c.initial_peers.clear();
  }

  r.get_string("public_name", c.public_name);
  if (r.get_string("swarm_id", c.swarm_id))
    if (auto problem = check_swarm_id(c.swarm_id)) r.fail("swarm_id", *problem);
  if (r.get_string("dtype", c.dtype))
    if (auto problem = check_dtype(c.dtype)) r.fail("dtype", *problem);
  if (r.get_string("device", c.device))
    if (auto problem = check_device(c.device)) r.fail("device", *problem);
  r.get_string("data_dir", c.data_dir);
  r.get_int("cache_tokens", c.cache_tokens, 1, std::numeric_limits<int64_t>::max());
  if (r.get_string("kv_cache_dtype", c.kv_cache_dtype))
    if (auto problem = check_kv_cache_dtype(c.kv_cache_dtype)) r.fail("kv_cache_dtype", *problem);
  int64_t v = 0;
  if (r.get_int("threads", v, 0, kMaxThreads)) c.threads = static_cast<int>(v);
  r.get_double("step_timeout_s", c.step_timeout_s, 0, true);
  r.get_double("session_timeout_s", c.session_timeout_s, 0, true);
  if (r.get_int("max_sessions", v, 1, kMaxInt)) c.max_sessions = static_cast<int>(v);
  r.get_int("max_batch_tokens", c.max_batch_tokens, 0, kMaxBatchTokens);
  if (r.get_int("max_sessions_per_peer", v, 1, kMaxInt)) c.max_sessions_per_peer = static_cast<int>(v);
  if (r.get_int("cache_tokens_per_peer", v, 1, std::numeric_limits<int64_t>::max())) c.cache_tokens_per_peer = v;
  r.get_double("peer_requests_per_second", c.peer_requests_per_second, 0, true);
  r.get_int("inject_step_errors_after", c.inject_step_errors_after, -1, std::numeric_limits<int64_t>::max());
  r.get_double("inject_wrong_outputs", c.inject_wrong_outputs, 0, false);
  if (const toml::node* n = r.get_node("throughput")) {
    const std::string want = "must be \"auto\", \"eval\" or a number >= 0 (requests per second), got ";
    if (n->is_string()) {
      if (auto problem = check_throughput(n->as_string()->get())) r.fail("throughput", *problem);
      c.throughput = n->as_string()->get();
    } else if (n->is_integer() && n->as_integer()->get() >= 0) {
      c.throughput = std::to_string(n->as_integer()->get());
    } else if (n->is_floating_point() && std::isfinite(n->as_floating_point()->get()) &&
               n->as_floating_point()->get() >= 0) {
      c.throughput = toml_double(n->as_floating_point()->get());
    } else {
      r.fail("throughput", want + describe_value(*n));
    }
  }
  r.get_double("update_period_s", c.update_period_s, 0, true);
  if (r.get_string_array("adapters", c.adapters))
    if (auto problem = check_adapters(c.adapters)) r.fail("adapters", *problem);
  r.get_double("balance_quality", c.balance_quality, 0, false);
  r.get_double("mean_balance_check_period_s", c.mean_balance_check_period_s, 0, true);
  r.get_int("max_peer_connections", c.max_peer_connections, 1, kMaxPeerConnections);
  r.get_int("max_peer_connections_per_address", c.max_peer_connections_per_address, 1, kMaxPeerConnections);
  r.get_double("peer_connections_per_second", c.peer_connections_per_second, 0, true);
  r.get_int("max_peer_frame_mb", c.max_peer_frame_mb, 1, kMaxPeerFrameMb);
  read_credential_keys(r, c.credentials);
}

NodeConfig load_node_config(const std::string& toml_path) {
  return load_node_config_text(read_config_file(toml_path), toml_path);
}

NodeConfig load_node_config_text(std::string_view text, const std::string& toml_path) {
  const toml::table table = parse_config_text(text, toml_path);
  ConfigProblems problems;
  TableReader reader(table, toml_path);
  NodeConfig config;
  read_node_keys(reader, config);
  reader.finish();
  problems.check();
  return config;
}

void validate(const NodeConfig& config, const std::string& source) { validate_node(config, source, ""); }

void validate_node(const NodeConfig& c, const std::string& source, const std::string& prefix) {
  // Every problem is reported: recorded in the ConfigProblems alive (a swarm file's), else in one of its own.
  std::optional<ConfigProblems> own;
  ConfigProblems* problems = ConfigProblems::current();
  if (!problems) problems = &own.emplace();
  auto fail = [&](const std::string& key, const std::string& problem) {
    problems->add(source + ": '" + prefix + key + "' " + problem, 0);
  };
  auto positive = [&](const std::string& key, double v) {
    if (!std::isfinite(v) || v <= 0) fail(key, "must be a number > 0, got " + toml_double(v));
  };
  if (c.model.empty()) fail("model", "is not set: give a model directory, a .gguf file or \"demo\"");
  if (auto problem = check_swarm_id(c.swarm_id)) fail("swarm_id", *problem);
  if (c.num_blocks && *c.num_blocks < 1)
    fail("num_blocks", "must be an integer >= 1, got " + std::to_string(*c.num_blocks));
  if (c.block_indices && (c.block_indices->first < 0 || c.block_indices->first >= c.block_indices->last))
    fail("block_indices", "must be \"FIRST:LAST\" with 0 <= FIRST < LAST (e.g. \"10:20\"), got " +
                              toml_quote(block_span(c.block_indices->first, c.block_indices->last)));
  if (c.num_blocks && c.block_indices)
    fail("num_blocks", "and '" + prefix + "block_indices' exclude each other: give one of them");
  if (auto problem = check_host(c.host)) fail("host", *problem);
  if (!c.announce_address.empty())
    if (auto problem = check_peer_address(c.announce_address)) fail("announce_address", *problem);
  if (auto p = check_credentials(c.credentials)) fail(p->key, p->problem);
  for (const auto& peer : c.initial_peers)
    if (auto problem = check_peer_address(peer)) fail("initial_peers", *problem);
  if (c.new_swarm && !c.initial_peers.empty())
    fail("new_swarm", "and '" + prefix + "initial_peers' exclude each other: a new swarm has no initial peers");
  if (auto problem = check_dtype(c.dtype)) fail("dtype", *problem);
  if (auto problem = check_device(c.device)) fail("device", *problem);
  if (c.cache_tokens < 1) fail("cache_tokens", "must be an integer >= 1, got " + std::to_string(c.cache_tokens));
  if (auto problem = check_kv_cache_dtype(c.kv_cache_dtype)) fail("kv_cache_dtype", *problem);
  if (c.threads < 0 || c.threads > kMaxThreads)
    fail("threads", "must be an integer in 0.." + std::to_string(kMaxThreads) + ", got " + std::to_string(c.threads));
  positive("step_timeout_s", c.step_timeout_s);
  positive("session_timeout_s", c.session_timeout_s);
  if (c.max_sessions < 1) fail("max_sessions", "must be an integer >= 1, got " + std::to_string(c.max_sessions));
  if (c.max_sessions_per_peer && *c.max_sessions_per_peer < 1)
    fail("max_sessions_per_peer", "must be an integer >= 1, got " + std::to_string(*c.max_sessions_per_peer));
  if (c.cache_tokens_per_peer && *c.cache_tokens_per_peer < 1)
    fail("cache_tokens_per_peer", "must be an integer >= 1, got " + std::to_string(*c.cache_tokens_per_peer));
  positive("peer_requests_per_second", c.peer_requests_per_second);
  if (!std::isfinite(c.inject_wrong_outputs) || c.inject_wrong_outputs < 0 || c.inject_wrong_outputs > 1)
    fail("inject_wrong_outputs", "must be a number in 0..1, got " + toml_double(c.inject_wrong_outputs));
  if (auto problem = check_throughput(c.throughput)) fail("throughput", *problem);
  positive("update_period_s", c.update_period_s);
  // Announcements live twice the period, and DHT nodes refuse records living over an hour (kMaxDhtTtlNs).
  if (c.update_period_s > 1800)
    fail("update_period_s",
         "must be at most 1800 (records live twice the period, "
         "an hour at most), got " +
             toml_double(c.update_period_s));
  if (auto problem = check_adapters(c.adapters)) fail("adapters", *problem);
  if (!std::isfinite(c.balance_quality) || c.balance_quality < 0)
    fail("balance_quality", "must be a number >= 0, got " + toml_double(c.balance_quality));
  positive("mean_balance_check_period_s", c.mean_balance_check_period_s);
  auto in_range = [&](const char* key, int64_t v, int64_t hi) {
    if (v < 1 || v > hi) fail(key, "must be an integer in 1.." + std::to_string(hi) + ", got " + std::to_string(v));
  };
  in_range("max_peer_connections", c.max_peer_connections, kMaxPeerConnections);
  in_range("max_peer_connections_per_address", c.max_peer_connections_per_address, kMaxPeerConnections);
  positive("peer_connections_per_second", c.peer_connections_per_second);
  in_range("max_peer_frame_mb", c.max_peer_frame_mb, kMaxPeerFrameMb);
  if (own) own->check();
}

peer_limits peer_limits_of(const NodeConfig& c) {
  peer_limits l;
  l.max_connections = static_cast<size_t>(c.max_peer_connections);
  l.max_connections_per_address = static_cast<size_t>(c.max_peer_connections_per_address);
  l.new_connections_per_second = c.peer_connections_per_second;
  l.max_frame_bytes = static_cast<uint32_t>(c.max_peer_frame_mb) << 20;
  return l;
}

peer_quota_options peer_quota_of(const NodeConfig& c) {
  peer_quota_options q;
  q.sessions = c.max_sessions_per_peer ? *c.max_sessions_per_peer : std::max(1, c.max_sessions / 2);
  q.cache_tokens = c.cache_tokens_per_peer ? *c.cache_tokens_per_peer : std::max<int64_t>(1, c.cache_tokens / 2);
  q.requests_per_second = c.peer_requests_per_second;
  return q;
}

std::string to_toml(const NodeConfig& c, const std::string& table) {
  std::string out;
  if (!table.empty()) out += table + "\n";
  auto line = [&](const char* key, const std::string& value) { out += std::string(key) + " = " + value + "\n"; };
  line("model", toml_quote(c.model));
  if (c.num_blocks) line("num_blocks", std::to_string(*c.num_blocks));
  if (c.block_indices) line("block_indices", toml_quote(block_span(c.block_indices->first, c.block_indices->last)));
  if (!c.num_blocks && !c.block_indices) out += "# num_blocks, block_indices: not set (as many blocks as fit)\n";
  line("host", toml_quote(c.host));
  line("port", std::to_string(c.port));
  if (!c.announce_address.empty()) line("announce_address", toml_quote(c.announce_address));
  line("initial_peers", toml_string_array(c.initial_peers));
  line("new_swarm", c.new_swarm ? "true" : "false");
  line("public_name", toml_quote(c.public_name));
  line("swarm_id", toml_quote(c.swarm_id));
  line("dtype", toml_quote(c.dtype));
  line("device", toml_quote(c.device));
  line("threads", std::to_string(c.threads));
  line("data_dir", toml_quote(node_data_dir(c)));
  line("cache_tokens", std::to_string(c.cache_tokens));
  line("kv_cache_dtype", toml_quote(c.kv_cache_dtype));
  line("max_sessions", std::to_string(c.max_sessions));
  line("max_batch_tokens", std::to_string(c.max_batch_tokens));
  if (c.max_sessions_per_peer)
    line("max_sessions_per_peer", std::to_string(*c.max_sessions_per_peer));
  else
    out += "# max_sessions_per_peer: not set (half of max_sessions)\n";
  if (c.cache_tokens_per_peer)
    line("cache_tokens_per_peer", std::to_string(*c.cache_tokens_per_peer));
  else
    out += "# cache_tokens_per_peer: not set (half of cache_tokens)\n";
  line("peer_requests_per_second", toml_double(c.peer_requests_per_second));
  line("step_timeout_s", toml_double(c.step_timeout_s));
  line("session_timeout_s", toml_double(c.session_timeout_s));
  if (c.inject_step_errors_after >= 0) line("inject_step_errors_after", std::to_string(c.inject_step_errors_after));
  if (c.inject_wrong_outputs > 0) line("inject_wrong_outputs", toml_double(c.inject_wrong_outputs));
  line("throughput", toml_quote(c.throughput));
  line("update_period_s", toml_double(c.update_period_s));
  line("adapters", toml_string_array(c.adapters));
  line("balance_quality", toml_double(c.balance_quality));
  line("mean_balance_check_period_s", toml_double(c.mean_balance_check_period_s));
  line("max_peer_connections", std::to_string(c.max_peer_connections));
  line("max_peer_connections_per_address", std::to_string(c.max_peer_connections_per_address));
  line("peer_connections_per_second", toml_double(c.peer_connections_per_second));
  line("max_peer_frame_mb", std::to_string(c.max_peer_frame_mb));
  out += credential_toml(c.credentials);
  return out;
}

}  // namespace corolla
