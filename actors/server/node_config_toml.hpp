// Reading node keys from any TOML table, for files that hold them besides a node's own (local swarms).
#pragma once

#include "actors/config/config_file.hpp"
#include "actors/server/node_config.hpp"

namespace corolla {

// Applies the node keys present in the reader's table over `config` (defaults, or keys inherited from an outer
// table), checking each. A table that sets one of two keys excluding each other drops the other from `config`
// (num_blocks / block_indices; initial_peers / new_swarm = true); setting both in one table is an error. Does
// not call finish(), so the caller can allow keys of its own first.
void read_node_keys(TableReader& reader, NodeConfig& config);

// validate() with key names prefixed ("server[1].") in the messages.
void validate_node(const NodeConfig& config, const std::string& source, const std::string& key_prefix);

}  // namespace corolla
