// corolla: run models collaboratively. `corolla --help` lists the subcommands.
#include <exception>
#include <iostream>
#include <vector>

#include "actors/log/node_log.hpp"
#include "apps/corolla/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Corolla: run large language models collaboratively"};
  app.set_version_flag("--version", std::string("corolla ") + COROLLA_VERSION);
  app.require_subcommand(1);
  // What nodes log (actors/log/node_log.hpp); given before or after the subcommand.
  std::string log_level;
  app.add_option("--log_level", log_level,
                 "What the node logs on standard error: LEVEL, or PART=LEVEL items after an optional LEVEL "
                 "(levels trace, debug, info, warn, error, off; parts session, client, server, dht, balance). "
                 "Default: COROLLA_LOG, else warn");
  app.fallthrough();  // subcommands pass --log_level up to here
  std::vector<std::pair<CLI::App*, corolla::cli::Runner>> commands;
  auto add = [&](corolla::cli::Runner (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    corolla::cli::Runner run = adder(app);
    commands.emplace_back(app.get_subcommands({}).at(before), std::move(run));
  };
  add(corolla::cli::add_run);
  add(corolla::cli::add_generate);
  add(corolla::cli::add_serve);
  add(corolla::cli::add_chat);
  add(corolla::cli::add_dht);
  add(corolla::cli::add_config_check);
  add(corolla::cli::add_tokenize);
  add(corolla::cli::add_finetune);
  add(corolla::cli::add_api);
  add(corolla::cli::add_sim);
  add(corolla::cli::add_keys);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    corolla::log::configure_from_environment();
    if (!log_level.empty()) corolla::log::configure(log_level);
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
