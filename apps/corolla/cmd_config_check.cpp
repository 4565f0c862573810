// corolla config-check: load and validate a node, client, local-swarm or API configuration file, and print it
// resolved (defaults filled in) as TOML.
#include <filesystem>
#include <iostream>

#include "actors/client/swarm_config.hpp"
#include "apps/api/api_config.hpp"
#include "apps/corolla/commands.hpp"
#include "model/model_path.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla::cli {
namespace {

struct CheckOptions {
  std::string node;
  std::string client;
  std::string swarm;
  std::string api;
};

// What `serve` checks against the model before it serves, checked here by the same rule (ModelConfig::span_problem);
// when the model cannot be found the output says so rather than passing it silently. A model that is found but
// broken is an error, as it would be for serve.
std::string check_against_model(const NodeConfig& config) {
  if (!config.block_indices) return "";
  std::string model_path;
  try {
    model_path = resolve_model_path(config.model);
  } catch (const std::exception& e) {
    return "# block_indices not checked against the model: " + std::string(e.what()) + "\n";
  }
  if (!std::filesystem::exists(model_path))
    return "# block_indices not checked against the model: " + model_path + " does not exist here\n";
  const ModelConfig model = open_weights(model_path)->config();
  if (auto problem = model.span_problem(config.block_indices->first, config.block_indices->last))
    throw ConfigError(model_path + ": block_indices: " + *problem);
  return "";
}

int run(const CheckOptions& o) {
  std::string text;
  std::string path;
  if (!o.node.empty()) {
    path = o.node;
    const NodeConfig config = load_node_config(path);
    validate(config, path);
    text = to_toml(config) + check_against_model(config);
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
