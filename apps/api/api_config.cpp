#include "apps/api/api_config.hpp"

#include <limits>
#include <set>

#include "actors/config/config_file.hpp"

namespace corolla::api {
namespace {
constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
}

namespace {
ApiConfig read_api_config(const toml::table& table, const std::string& path) {
  ConfigProblems problems;
  TableReader r(table, path);
  ApiConfig c;
  r.get_string("host", c.host);
  int64_t port = c.port;
  if (r.get_int("port", port, 0, 65535)) c.port = static_cast<uint16_t>(port);
  r.get_string("web_dir", c.web_dir);
  std::vector<std::string> peers;
  if (r.get_string_array("initial_peers", peers)) {
    for (size_t i = 0; i < peers.size(); ++i)
      if (auto problem = check_peer_address(peers[i]))
        r.fail("initial_peers", *problem, r.get_node("initial_peers")->as_array()->get(i));
    c.initial_peers = std::move(peers);
  }
  if (r.get_string("mode", c.mode) && c.mode != "push" && c.mode != "relay")
    r.fail("mode", "must be \"push\" or \"relay\", got " + toml_quote(c.mode));
  r.get_double("request_timeout_s", c.request_timeout_s, 0, true);
  r.get_int("max_sessions", c.max_sessions, 1, 100000);
  r.get_int("spot_check_every", c.spot_check_every, 0, 1 << 30);
  read_credential_keys(r, c.credentials);
  r.get_int("max_length", c.max_length, 2, kMaxInt);
  r.get_int("max_new_tokens", c.max_new_tokens, 1, kMaxInt);
  r.get_int("default_max_tokens", c.default_max_tokens, 1, kMaxInt);
  r.get_double("state_ttl_s", c.state_ttl_s, 0, false);
  r.get_int("max_connections", c.max_connections, 1, 1000000);
  r.get_int("max_connections_per_address", c.max_connections_per_address, 1, 1000000);
  r.get_double("header_timeout_s", c.header_timeout_s, 0, true);
  r.get_double("body_timeout_s", c.body_timeout_s, 0, true);
  r.get_int("max_body_bytes", c.max_body_bytes, 1024, 1 << 30);
  if (const toml::node* models = r.get_node("model")) {
    const toml::array* arr = models->as_array();
    if (!arr) r.fail("model", "must be an array of tables: write each model as [[model]]");
    for (size_t i = 0; i < arr->size(); ++i) {
      const toml::table* t = arr->get(i)->as_table();
      if (!t) r.fail("model", "must be an array of tables: write each model as [[model]]", arr->get(i));
      TableReader m(*t, path, "model[" + std::to_string(i) + "].");
      ApiModelConfig mc;
      m.get_string("name", mc.name);
      if (!m.get_string("path", mc.path) || mc.path.empty())
        m.fail("path", "is required: a model directory, a .gguf file or \"demo\"");
      m.get_string("tokenizer", mc.tokenizer);
      if (m.get_string("swarm_id", mc.swarm_id))
        if (auto problem = check_swarm_id(mc.swarm_id)) m.fail("swarm_id", *problem);
      m.finish();
      c.models.push_back(std::move(mc));
    }
  }
  r.finish();
  problems.check();
  return c;
}
}  // namespace

ApiConfig load_api_config(const std::string& path) { return read_api_config(parse_config_file(path), path); }

ApiConfig load_api_config_text(std::string_view text, const std::string& source) {
  return read_api_config(parse_config_text(text, source), source);
}

void validate(const ApiConfig& c, const std::string& source) {
  auto fail = [&](const std::string& key, const std::string& problem) {
    throw ConfigError(source + ": '" + key + "' " + problem);
  };
  if (c.initial_peers.empty()) fail("initial_peers", "is empty: give the \"HOST:PORT\" of at least one node");
  for (const auto& peer : c.initial_peers)
    if (auto problem = check_peer_address(peer)) fail("initial_peers", *problem);
  if (c.models.empty()) fail("model", "is missing: add at least one [[model]] table with a 'path'");
  std::set<std::string> names;
  for (const auto& m : c.models)
    if (!m.name.empty() && !names.insert(m.name).second) fail("model", "names '" + m.name + "' twice");
  // Seconds become clock durations: past a day they mean "never", and far past it they overflow the clock.
  for (auto [key, seconds] : {std::pair{"request_timeout_s", c.request_timeout_s},
                              {"state_ttl_s", c.state_ttl_s},
                              {"header_timeout_s", c.header_timeout_s},
                              {"body_timeout_s", c.body_timeout_s}})
    if (!(seconds <= 86400)) fail(key, "must be at most 86400 (a day), got " + toml_double(seconds));
  if (auto p = check_credentials(c.credentials)) fail(p->key, p->problem);
  if (c.spot_check_every < 0 || c.spot_check_every > (1 << 30))
    fail("spot_check_every", "must be an integer in 0..1073741824, got " + std::to_string(c.spot_check_every));
  if (c.max_connections_per_address > c.max_connections)
    fail("max_connections_per_address", "must not exceed max_connections (" + std::to_string(c.max_connections) + ")");
  if (c.default_max_tokens > c.max_new_tokens)
    fail("default_max_tokens", "must not exceed max_new_tokens (" + std::to_string(c.max_new_tokens) + ")");
}

std::string to_toml(const ApiConfig& c) {
  std::string out;
  auto line = [&](const char* key, const std::string& value) { out += std::string(key) + " = " + value + "\n"; };
  line("host", toml_quote(c.host));
  line("port", std::to_string(c.port));
  line("web_dir", toml_quote(c.web_dir));
  line("initial_peers", toml_string_array(c.initial_peers));
  line("mode", toml_quote(c.mode));
  line("request_timeout_s", toml_double(c.request_timeout_s));
  line("max_sessions", std::to_string(c.max_sessions));
  line("spot_check_every", std::to_string(c.spot_check_every));
  line("max_length", std::to_string(c.max_length));
  line("max_new_tokens", std::to_string(c.max_new_tokens));
  line("default_max_tokens", std::to_string(c.default_max_tokens));
  line("state_ttl_s", toml_double(c.state_ttl_s));
  line("max_connections", std::to_string(c.max_connections));
  line("max_connections_per_address", std::to_string(c.max_connections_per_address));
  line("header_timeout_s", toml_double(c.header_timeout_s));
  line("body_timeout_s", toml_double(c.body_timeout_s));
  line("max_body_bytes", std::to_string(c.max_body_bytes));
  out += credential_toml(c.credentials);
  for (const auto& m : c.models) {
    out += "\n[[model]]\n";
    line("name", toml_quote(m.name));
    line("path", toml_quote(m.path));
    line("tokenizer", toml_quote(m.tokenizer));
    line("swarm_id", toml_quote(m.swarm_id));
  }
  return out;
}

}  // namespace corolla::api
