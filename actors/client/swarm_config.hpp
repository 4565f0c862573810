// A local swarm in one file: several servers and a client, for trying Corolla on one machine and for tests
// (config/swarm-local.toml documents it).
//
//   model = "demo"                        # top-level node keys: defaults inherited by every [[server]]
//   initial_peers = ["127.0.0.1:31331"]
//   [[server]]                            # one table per server, holding node keys
//   block_indices = "0:10"
//   port = 31331
//   new_swarm = true                      # drops the inherited initial_peers
//   [client]                              # optional: client keys
//   mode = "push"
//
// A server table that sets one of two keys excluding each other drops the other one it inherited
// (num_blocks / block_indices; initial_peers / new_swarm = true). The client inherits the top-level 'model' and
// 'initial_peers' unless [client] sets them; with no initial peers at all, it joins through every server that
// has a fixed port. Servers must not share a port or a data directory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "actors/client/client_config.hpp"
#include "actors/server/node_config.hpp"

namespace corolla {

struct SwarmConfig {
  std::vector<NodeConfig> servers;  // at least one
  ClientConfig client;

  bool operator==(const SwarmConfig&) const = default;
};

// Reads and validates a local-swarm file. Messages name the file, the line and the key, with key paths such as
// 'server[1].port' (servers counted from 0) and 'client.mode'. Throws ConfigError.
SwarmConfig load_swarm_config(const std::string& toml_path);
// The same for a file's text already in memory; `source` names it in messages.
SwarmConfig load_swarm_config_text(std::string_view text, const std::string& source);

// Checks every server and the client, and that servers share no port or data directory. Throws ConfigError.
void validate(const SwarmConfig& config, const std::string& source);

// The swarm as TOML ([[server]] tables, then [client]) that load_swarm_config() reads back to the same values.
std::string to_toml(const SwarmConfig& config);

}  // namespace corolla
