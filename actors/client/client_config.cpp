#include "actors/client/client_config.hpp"

#include <optional>
#include <cmath>
#include <limits>

#include "actors/client/client_config_toml.hpp"

namespace corolla {
namespace {

std::optional<std::string> check_mode(const std::string& mode) {
  if (mode == "push" || mode == "relay") return std::nullopt;
  return "must be \"push\" or \"relay\", got " + toml_quote(mode);
}

constexpr int64_t kMaxLength = std::numeric_limits<int32_t>::max();

}  // namespace

void read_client_keys(TableReader& r, ClientConfig& c) {
  if (r.get_string("model", c.model) && c.model.empty())
    r.fail("model", "must not be empty: give a model directory, a .gguf file or \"demo\"");
  std::vector<std::string> peers;
  if (r.get_string_array("initial_peers", peers)) {
    for (size_t i = 0; i < peers.size(); ++i)
      if (auto problem = check_peer_address(peers[i]))
        r.fail("initial_peers", *problem, r.get_node("initial_peers")->as_array()->get(i));
    c.initial_peers = std::move(peers);
  }
  if (r.get_string("mode", c.mode))
    if (auto problem = check_mode(c.mode)) r.fail("mode", *problem);
  r.get_int("max_length", c.max_length, 1, kMaxLength);
  r.get_double("request_timeout_s", c.request_timeout_s, 0, true);
}

ClientConfig load_client_config(const std::string& toml_path) {
  return load_client_config_text(read_config_file(toml_path), toml_path);
}

ClientConfig load_client_config_text(std::string_view text, const std::string& toml_path) {
  const toml::table table = parse_config_text(text, toml_path);
  ConfigProblems problems;
  TableReader reader(table, toml_path);
  ClientConfig config;
  read_client_keys(reader, config);
  reader.finish();
  problems.check();
  return config;
}

void validate(const ClientConfig& config, const std::string& source) { validate_client(config, source, ""); }

void validate_client(const ClientConfig& c, const std::string& source, const std::string& prefix) {
  // Every problem is reported: recorded in the ConfigProblems alive (a swarm file's), else in one of its own.
  std::optional<ConfigProblems> own;
  ConfigProblems* problems = ConfigProblems::current();
  if (!problems) problems = &own.emplace();
  auto fail = [&](const std::string& key, const std::string& problem) {
    problems->add(source + ": '" + prefix + key + "' " + problem, 0);
  };
  if (c.model.empty()) fail("model", "is not set: give a model directory, a .gguf file or \"demo\"");
  if (c.initial_peers.empty()) fail("initial_peers", "is empty: give the \"HOST:PORT\" of at least one node");
  for (const auto& peer : c.initial_peers)
    if (auto problem = check_peer_address(peer)) fail("initial_peers", *problem);
  if (auto problem = check_mode(c.mode)) fail("mode", *problem);
  if (c.max_length < 1 || c.max_length > kMaxLength)
    fail("max_length",
         "must be an integer in 1.." + std::to_string(kMaxLength) + ", got " + std::to_string(c.max_length));
  if (!std::isfinite(c.request_timeout_s) || c.request_timeout_s <= 0)
    fail("request_timeout_s", "must be a number > 0, got " + toml_double(c.request_timeout_s));
  if (own) own->check();
}

std::string to_toml(const ClientConfig& c, const std::string& table) {
  std::string out;
  if (!table.empty()) out += table + "\n";
  auto line = [&](const char* key, const std::string& value) { out += std::string(key) + " = " + value + "\n"; };
  line("model", toml_quote(c.model));
  line("initial_peers", toml_string_array(c.initial_peers));
  line("mode", toml_quote(c.mode));
  line("max_length", std::to_string(c.max_length));
  line("request_timeout_s", toml_double(c.request_timeout_s));
  return out;
}

}  // namespace corolla
