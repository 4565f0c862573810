// corolla serve: host a span of a model's blocks for the swarm until SIGINT/SIGTERM.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <iostream>
#include <random>

#include "actors/balance/block_selection.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/system_config.hpp"
#include "actors/server/server_node.hpp"
#include "actors/store/node_store.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/wait_for_signal.hpp"
#include "model/model_path.hpp"

namespace corolla::cli {
namespace {

// What the initial peers serve (peers that do not answer are left out).
std::vector<server_info> ask_peers(caf::scoped_actor& self, const caf::actor& connector,
                                   const std::vector<std::string>& peers) {
  std::vector<server_info> infos;
  for (const auto& peer : peers) {
    self->request(connector, std::chrono::seconds(10), resolve_atom::value, peer)
        .receive(
            [&](caf::actor gate) {
              self->request(gate, std::chrono::seconds(10), info_request{})
                  .receive([&](server_info& i) { infos.push_back(std::move(i)); },
                           [&](caf::error& e) { std::cerr << "peer " << peer << ": " << describe(e) << "\n"; });
            },
            [&](caf::error& e) { std::cerr << "peer " << peer << ": " << describe(e) << "\n"; });
  }
  return infos;
}

int run(const NodeConfig& cfg) {
  block_stop_signals();
  auto source = open_weights(resolve_model_path(cfg.model));
  const int64_t total = source->config().num_layers;

  corolla_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  auto connector = spawn_connector(sys);

  server_setup setup;
  setup.model = source->origin();
  if (cfg.block_indices) {
    setup.first_block = cfg.block_indices->first;
    setup.last_block = cfg.block_indices->last;
  } else if (cfg.num_blocks) {
    const auto infos = ask_peers(self, connector, cfg.initial_peers);
    setup.first_block = choose_first_block(block_throughputs(infos, total), std::min<int64_t>(*cfg.num_blocks, total));
    setup.last_block = setup.first_block + std::min<int64_t>(*cfg.num_blocks, total);
  } else {
    setup.first_block = 0;
    setup.last_block = total;
  }
  if (cfg.dtype != "auto") setup.dtype = parse_dtype(cfg.dtype);
  setup.device = cfg.device;
  setup.threads = cfg.threads;
  setup.public_name = cfg.public_name;
  setup.cache_tokens = cfg.cache_tokens;
  setup.max_sessions = cfg.max_sessions;
  setup.step_timeout = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cfg.step_timeout_s));
  setup.session_timeout =
      std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cfg.session_timeout_s));
  setup.seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  setup.progress = [](int64_t block, int64_t done, int64_t n) {
    std::cerr << "\rloading block " << block << " (" << done << "/" << n << ")" << (done == n ? "\n" : "")
              << std::flush;
  };
  NodeStore store(node_data_dir(cfg));
  setup.store = &store;
  server_node node = start_server_node(sys, setup, connector, source);

  auto port = sys.middleman().publish(node.gate, cfg.port, cfg.host.c_str(), true);
  if (!port) {
    self->send_exit(node.gate, caf::exit_reason::user_shutdown);
    throw std::runtime_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " +
                             sys.render(port.error()));
  }
  const std::string address = cfg.host + ":" + std::to_string(*port);
  self->send(node.gate, address_atom::value, address);
  std::cerr << "loaded blocks " << setup.first_block << ":" << setup.last_block << " in " << node.load_seconds
            << " s on " << node.backend->name() << "\n";
  std::cout << "serving blocks " << setup.first_block << ":" << setup.last_block << " of "
            << node.options.model_name << " at " << address << std::endl;

  const int sig = wait_for_stop_signal();
  std::cerr << "received signal " << sig << ", stopping\n";
  sys.middleman().unpublish(node.gate, *port);
  self->send_exit(node.gate, caf::exit_reason::user_shutdown);
  self->send_exit(connector, caf::exit_reason::user_shutdown);
  return 0;
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto flags = std::make_shared<NodeFlags>();
  auto* cmd = app.add_subcommand("serve", "Host a span of a model's blocks for the swarm");
  add_node_flags(*cmd, *flags);
  return [flags] { return run(resolve_node_config(*flags)); };
}

}  // namespace corolla::cli
