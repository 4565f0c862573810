// corolla config-check: load and validate a node, client, local-swarm or API configuration file, and print it
// resolved (defaults filled in) as TOML.
#include <iostream>

#include "actors/client/swarm_config.hpp"
#include "apps/api/api_config.hpp"
#include "apps/corolla/commands.hpp"

namespace corolla::cli {
namespace {

struct CheckOptions {
  std::string node;
  std::string client;
  std::string swarm;
  std::string api;
};

int run(const CheckOptions& o) {
  std::string text;
  std::string path;
  if (!o.node.empty()) {
    path = o.node;
    const NodeConfig config = load_node_config(path);
    validate(config, path);
    text = to_toml(config);
  } else if (!o.client.empty()) {
    path = o.client;
    const ClientConfig config = load_client_config(path);
    validate(config, path);
    text = to_toml(config);
  } else if (!o.api.empty()) {
    path = o.api;
    const api::ApiConfig config = api::load_api_config(path);
    api::validate(config, path);
    text = api::to_toml(config);
  } else {
    path = o.swarm;
    text = to_toml(load_swarm_config(path));
  }
  std::cout << "# " << path << ": valid; the resolved configuration, defaults included:\n" << text;
  return 0;
}

}  // namespace

Runner add_config_check(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  auto* cmd = app.add_subcommand("config-check", "Check a configuration file and print it resolved, as TOML");
  auto* which = cmd->add_option_group("file", "The file to check (one of)");
  which->add_option("--node", o->node, "A node's file (config/node.toml documents the keys)")->type_name("FILE");
  which->add_option("--client", o->client, "A client's file (config/client.toml documents the keys)")
      ->type_name("FILE");
  which->add_option("--swarm", o->swarm, "A local swarm's file (config/swarm-local.toml documents it)")
      ->type_name("FILE");
  which->add_option("--api", o->api, "The HTTP API's file (config/api.toml documents the keys)")->type_name("FILE");
  which->require_option(1);
  return [o] { return run(*o); };
}

}  // namespace corolla::cli
