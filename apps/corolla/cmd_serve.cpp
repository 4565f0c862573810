// corolla serve: host a span of a model's blocks for the swarm until SIGINT/SIGTERM.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <iostream>
#include <map>
#include <random>

#include "actors/balance/block_selection.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/server/announcer.hpp"
#include "actors/server/node_supervisor.hpp"
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

// What the swarm serves, read from the DHT (every block's key).
std::vector<server_info> read_swarm(caf::scoped_actor& self, const caf::actor& dht, const std::string& prefix,
                                    int64_t total_blocks) {
  std::map<std::string, server_info> found;
  for (int64_t b = 0; b < total_blocks; ++b)
    self->request(dht, std::chrono::seconds(30), dht_get{block_key(prefix, b)})
        .receive(
            [&](dht_get_reply& r) {
              for (auto& s : parse_servers(r.entries))
                if (s.info.state != "offline") found[s.info.address] = std::move(s.info);
            },
            [&](caf::error& e) { std::cerr << "reading block " << b << " from the DHT: " << describe(e) << "\n"; });
  std::vector<server_info> out;
  for (auto& [address, info] : found) out.push_back(std::move(info));
  return out;
}

void bootstrap(caf::scoped_actor& self, const caf::actor& dht, const std::vector<std::string>& peers) {
  caf::error failure;
  self->request(dht, std::chrono::seconds(60), dht_bootstrap{peers})
      .receive([](const dht_bootstrap_reply&) {}, [&](caf::error& e) { failure = std::move(e); });
  if (failure) throw std::runtime_error("joining the swarm: " + describe(failure));
}

int run(const NodeConfig& cfg) {
  block_stop_signals();
  auto source = open_weights(resolve_model_path(cfg.model));
  const int64_t total = source->config().num_layers;

  corolla_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};
  auto connector = spawn_connector(sys);
  NodeStore store(node_data_dir(cfg));

  // The server's DHT node; until the gate is published it only asks (others learn its address afterwards).
  dht_options dopt;
  dopt.id = store.node_key();
  auto dht = spawn_dht_node(sys, dopt, connector);
  const std::string prefix = cfg.swarm_id.empty() ? default_model_prefix(*source) : cfg.swarm_id;
  const bool joins = !cfg.new_swarm && !cfg.initial_peers.empty();
  if (joins) bootstrap(self, dht, cfg.initial_peers);

  server_setup setup;
  setup.model = source->origin();
  if (cfg.block_indices) {
    setup.first_block = cfg.block_indices->first;
    setup.last_block = cfg.block_indices->last;
  } else if (cfg.num_blocks) {
    const auto infos = joins ? read_swarm(self, dht, prefix, total) : std::vector<server_info>{};
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
  setup.inject_step_errors_after = cfg.inject_step_errors_after;
  setup.step_timeout = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cfg.step_timeout_s));
  setup.session_timeout =
      std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cfg.session_timeout_s));
  setup.seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  setup.progress = [](int64_t block, int64_t done, int64_t n) {
    std::cerr << "\rloading block " << block << " (" << done << "/" << n << ")" << (done == n ? "\n" : "")
              << std::flush;
  };
  setup.store = &store;
  setup.dht = dht;
  // The gate first: published and announced as "joining" while the blocks load.
  server_node node = start_server_node(sys, setup, connector, source, false);

  auto port = sys.middleman().publish(node.gate, cfg.port, cfg.host.c_str(), true);
  if (!port) {
    self->send_exit(node.gate, caf::exit_reason::user_shutdown);
    throw std::runtime_error("cannot listen on " + cfg.host + ":" + std::to_string(cfg.port) + ": " +
                             sys.render(port.error()));
  }
  const std::string address = cfg.host + ":" + std::to_string(*port);
  self->send(node.gate, address_atom::value, address);
  self->send(dht, address_atom::value, address);
  if (joins) bootstrap(self, dht, cfg.initial_peers);  // now as a full node others add to their tables
  announcer_options aopt;
  aopt.model_prefix = prefix;
  aopt.period = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(cfg.update_period_s));
  auto announcer = spawn_announcer(sys, aopt, node.gate, dht, connector);
  auto supervisor = spawn_node_supervisor(sys, {node.gate, dht, announcer});
  load_server_blocks(sys, node, setup, *source);
  self->send(announcer, state_atom::value, "online");  // announce at once, not at the next period
  std::cerr << "loaded blocks " << setup.first_block << ":" << setup.last_block << " in " << node.load_seconds
            << " s on " << node.backend->name() << "\n";
  std::cout << "serving blocks " << setup.first_block << ":" << setup.last_block << " of " << prefix << " at "
            << address << std::endl;

  const int sig = wait_for_stop_signal();
  std::cerr << "received signal " << sig << ", announcing offline and stopping\n";
  self->request(supervisor, std::chrono::seconds(10), close_atom::value).receive([](const ack&) {}, [](caf::error&) {});
  sys.middleman().unpublish(node.gate, *port);
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
