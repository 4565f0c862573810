#include "actors/client/swarm_config.hpp"

#include <functional>

#include "actors/client/client_config_toml.hpp"
#include "actors/server/node_config_toml.hpp"

namespace corolla {
namespace {

std::string server_key(size_t i) { return "server[" + std::to_string(i) + "]."; }

// `where(i)` is the source to name for server i, or for the client when i == servers.size().
void check_swarm(const SwarmConfig& s, const std::string& source, const std::function<std::string(size_t)>& where) {
  if (s.servers.empty()) throw ConfigError(source + ": no [[server]] table: a swarm needs at least one server");
  for (size_t i = 0; i < s.servers.size(); ++i) {
    const NodeConfig& node = s.servers[i];
    validate_node(node, where(i), server_key(i));
    for (size_t j = 0; j < i; ++j) {
      const NodeConfig& other = s.servers[j];
      if (node.port != 0 && node.port == other.port)
        throw ConfigError(where(i) + ": '" + server_key(i) + "port' is " + std::to_string(node.port) + ", as is '" +
                          server_key(j) + "port': give each server its own port");
      if (node_data_dir(node) == node_data_dir(other))
        throw ConfigError(where(i) + ": '" + server_key(i) + "data_dir' is " + toml_quote(node_data_dir(node)) +
                          ", as is '" + server_key(j) +
                          "data_dir': give each server its own 'public_name' or 'data_dir'");
    }
  }
  validate_client(s.client, where(s.servers.size()), "client.");
}

std::string peer_address(const NodeConfig& node) {
  const bool ipv6 = node.host.find(':') != std::string::npos;
  return (ipv6 ? "[" + node.host + "]" : node.host) + ":" + std::to_string(node.port);
}

}  // namespace

SwarmConfig load_swarm_config(const std::string& toml_path) {
  return load_swarm_config_text(read_config_file(toml_path), toml_path);
}

SwarmConfig load_swarm_config_text(std::string_view text, const std::string& toml_path) {
  const toml::table table = parse_config_text(text, toml_path);
  ConfigProblems problems;
  TableReader top(table, toml_path);
  NodeConfig defaults;
  read_node_keys(top, defaults);
  const toml::node* servers = top.get_node("server");
  const toml::node* client = top.get_node("client");
  top.finish();

  SwarmConfig swarm;
  std::vector<const toml::node*> server_tables;
  if (servers) {
    if (!servers->is_array_of_tables())
      top.fail("server", "must be an array of tables, written [[server]], got " + describe_value(*servers));
    for (const toml::node& t : *servers->as_array()) {
      TableReader reader(*t.as_table(), toml_path, server_key(server_tables.size()));
      NodeConfig node = defaults;
      read_node_keys(reader, node);
      reader.finish();
      swarm.servers.push_back(std::move(node));
      server_tables.push_back(&t);
    }
  }

  swarm.client.model = defaults.model;
  swarm.client.initial_peers = defaults.initial_peers;
  if (client) {
    if (!client->is_table()) top.fail("client", "must be a table, written [client], got " + describe_value(*client));
    TableReader reader(*client->as_table(), toml_path, "client.");
    read_client_keys(reader, swarm.client);
    reader.finish();
  }
  problems.check();
  if (swarm.client.initial_peers.empty()) {
    for (const auto& node : swarm.servers)
      if (node.port != 0) swarm.client.initial_peers.push_back(peer_address(node));
    if (swarm.client.initial_peers.empty() && !swarm.servers.empty())
      throw ConfigError(where(toml_path, client) +
                        "'client.initial_peers' is not set and no server has a fixed "
                        "port to join through: set 'initial_peers' in [client], or a 'port' in a [[server]]");
  }

  check_swarm(swarm, toml_path, [&](size_t i) {
    const toml::node* at = i < server_tables.size() ? server_tables[i] : client;
    std::string w = where(toml_path, at);
    return w.substr(0, w.size() - 2);  // without the ": " that where() ends with
  });
  problems.check();  // the servers' and the client's values, checked above
  return swarm;
}

void validate(const SwarmConfig& config, const std::string& source) {
  ConfigProblems problems;  // every server's and the client's problems together
  check_swarm(config, source, [&](size_t) { return source; });
  problems.check();
}

std::string to_toml(const SwarmConfig& config) {
  std::string out;
  for (const auto& node : config.servers) {
    out += to_toml(node, "[[server]]");
    out += '\n';
  }
  out += to_toml(config.client, "[client]");
  return out;
}

}  // namespace corolla
