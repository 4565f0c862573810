// corolla serve: host a span of a model's blocks for the swarm until SIGINT/SIGTERM.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <future>
#include <iostream>
#include <mutex>
#include <pthread.h>
#include <random>

#include "actors/net/peer_gateway.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/balance/balancer.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/server/network_probe.hpp"
#include "actors/server/node_supervisor.hpp"
#include "actors/server/server_node.hpp"
#include "actors/server/throughput.hpp"
#include "actors/store/node_store.hpp"
#include "actors/trust/node_identity.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "apps/corolla/wait_for_signal.hpp"
#include "model/lora.hpp"
#include "model/hub/fetch_model.hpp"

namespace corolla::cli {
namespace {

void bootstrap(caf::scoped_actor& self, const dht_node_actor& dht, const std::vector<std::string>& peers) {
  caf::error failure;
  self->request(dht, std::chrono::seconds(60), dht_bootstrap{peers})
      .receive([](const dht_bootstrap_reply&) {}, [&](caf::error& e) { failure = std::move(e); });
  if (failure) throw std::runtime_error("joining the swarm: " + describe(failure));
}

caf::timespan seconds(double s) { return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s)); }

// What the balancer reports, seen from the main thread: its first placement (or failure) through a future; a
// later failure wakes the main thread from its wait for a stop signal.
struct balance_watch {
  std::mutex mutex;
  std::promise<balancer_event> first;
  bool placed = false;
  std::string failure;
  pthread_t main_thread = pthread_self();

  void on_event(const balancer_event& e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!placed && (e.kind == balancer_event::placed || e.kind == balancer_event::failed)) {
      placed = true;
      first.set_value(e);
      return;
    }
    if (e.kind == balancer_event::moved)
      std::cerr << "moved to blocks " << e.first << ":" << e.last << " (the swarm's weakest block "
                << e.check.current_min << ", reachable " << e.check.reachable_min << ")" << std::endl;
    if (e.kind == balancer_event::failed) {
      failure = e.error;
      pthread_kill(main_thread, SIGTERM);
    }
  }
};

int run(const NodeConfig& cfg) {
  block_stop_signals();
  // A model fetched by name brings only the blocks served. A server that balances fetches each span when the
  // balancer chooses it (setup.fetch_span below), and block 0 first: the throughput measurement runs a block.
  const bool fetch_spans_later = cfg.num_blocks && !cfg.block_indices && hub::is_hub_name(cfg.model);
  const auto needs = cfg.block_indices   ? hub::ModelNeeds::blocks(cfg.block_indices->first, cfg.block_indices->last)
                     : fetch_spans_later ? hub::ModelNeeds::blocks(0, 1)
                                         : hub::ModelNeeds::blocks(0, -1);
  auto source = open_weights(hub::locate_model(cfg.model, needs));
  const int64_t total = source->config().num_layers;

  corolla_config sys_cfg;
  sys_cfg.peers = peer_limits_of(cfg);
  sys_cfg.tls = PeerTls::make(cfg.credentials);
  if (sys_cfg.tls) std::cerr << "TLS on peer links: " << sys_cfg.tls->description() << "\n";
  caf::actor_system sys{sys_cfg};
  stop_waiting_on_error unwinding{sys};
  caf::scoped_actor self{sys};
  auto connector = spawn_connector(sys);
  const std::unique_ptr<NodeStore> owned_store = open_node_store(node_data_dir(cfg), cfg.data_dir.empty());
  NodeStore& store = *owned_store;

  // The server's DHT node; until the gate is published it only asks (others learn its address afterwards).
  dht_options dopt;
  const SigningKey identity = node_identity(store);
  dopt.id = dht_id_of(identity.public_key());
  auto dht = spawn_dht_node(sys, dopt, connector);
  const std::string prefix = cfg.swarm_id.empty() ? default_model_prefix(*source) : cfg.swarm_id;
  const bool joins = !cfg.new_swarm && !cfg.initial_peers.empty();
  if (joins) bootstrap(self, dht, cfg.initial_peers);

  server_setup setup;
  setup.model = source->origin();
  int64_t span_blocks = total;
  if (cfg.block_indices) {
    setup.first_block = cfg.block_indices->first;
    setup.last_block = cfg.block_indices->last;
    span_blocks = setup.last_block - setup.first_block;
  } else if (cfg.num_blocks) {
    span_blocks = std::min<int64_t>(*cfg.num_blocks, total);  // the balancer chooses where
  } else {
    setup.first_block = 0;
    setup.last_block = total;
  }
  if (cfg.dtype != "auto") setup.dtype = parse_dtype(cfg.dtype);
  setup.device = cfg.device;
  setup.threads = cfg.threads;
  setup.backend = std::shared_ptr<Backend>(make_backend(setup.device, setup.threads));
  setup.public_name = cfg.public_name;
  setup.cache_tokens = cfg.cache_tokens;
  setup.kv_dtype = parse_dtype(cfg.kv_cache_dtype).value();  // checked with the config
  setup.max_sessions = cfg.max_sessions;
  setup.max_batch_tokens = cfg.max_batch_tokens;
  setup.per_peer = peer_quota_of(cfg);
  setup.inject_step_errors_after = cfg.inject_step_errors_after;
  setup.inject_wrong_outputs = cfg.inject_wrong_outputs;
  setup.step_timeout = seconds(cfg.step_timeout_s);
  setup.session_timeout = seconds(cfg.session_timeout_s);
  setup.seed = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  setup.progress = [](int64_t block, int64_t done, int64_t n) {
    std::cerr << "\rloading block " << block << " (" << done << "/" << n << ")" << (done == n ? "\n" : "")
              << std::flush;
  };
  setup.store = &store;
  if (fetch_spans_later)
    setup.fetch_span = [model = cfg.model](int64_t first, int64_t last) {
      return open_weights(hub::locate_model(model, hub::ModelNeeds::blocks(first, last)));
    };
  setup.dht = dht;
  setup.identity = std::make_shared<const SigningKey>(identity);
  setup.adapters = cfg.adapters;
  // A bad adapter is reported before anything is published (adapters are small: reading them twice is cheap).
  for (const auto& dir : cfg.adapters) {
    auto check = LoraAdapter::load(dir, source->config(), setup.first_block, setup.last_block, *make_cpu_backend(1));
    std::cerr << "adapter '" << check->name() << "': rank " << check->rank() << ", scale " << check->scale() << "\n";
  }

  // What the server offers: compute rates measured (or cached, or given) and the bandwidth to a peer.
  const network_estimate net =
      joins ? measure_network(sys, connector, cfg.initial_peers, source->config().hidden_size) : network_estimate{};
  setup.throughput =
      resolve_throughput(cfg.throughput, *source, *setup.backend, setup.dtype, span_blocks, net.network_rps, &store);
  const auto& tp = setup.throughput;
  std::cerr << "throughput " << tp.throughput << " tokens/s per block (" << tp.source << "; inference "
            << tp.inference_rps << ", forward " << tp.forward_rps << " tokens/s per block on " << setup.backend->name()
            << "; network "
            << (net.bytes_per_second > 0 ? std::to_string(net.bytes_per_second / 1e6) + " MB/s to " + net.peer
                                         : std::string("not measured"))
            << ")\n";

  // The gate first: published and announced as "joining" while the blocks load.
  server_node node = start_server_node(sys, setup, connector, source, false);

  auto port = publish_to_peers(sys, caf::actor_cast<caf::actor>(node.gate), cfg.host, cfg.port);
  if (!port) {
    self->send_exit(node.gate, caf::exit_reason::user_shutdown);
    throw std::runtime_error(listen_error_text(port.error()));
  }
  const std::string address =
      cfg.announce_address.empty() ? cfg.host + ":" + std::to_string(*port) : cfg.announce_address;
  self->send(node.gate, address_atom::value, address);
  self->send(dht, address_atom::value, address);
  if (joins) bootstrap(self, dht, cfg.initial_peers);  // now as a full node others add to their tables
  announcer_options aopt;
  aopt.identity = setup.identity;
  aopt.model_prefix = prefix;
  aopt.period = seconds(cfg.update_period_s);

  auto watch = std::make_shared<balance_watch>();
  std::optional<balancer_options> balance;
  if (cfg.num_blocks) {
    balance.emplace();
    balance->model_prefix = prefix;
    balance->num_blocks = span_blocks;
    balance->balance_quality = cfg.balance_quality;
    balance->mean_check_period = seconds(cfg.mean_balance_check_period_s);
    balance->seed = setup.seed;
    balance->on_event = [watch](const balancer_event& e) { watch->on_event(e); };
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto server = start_server_parts(sys, node, setup, source, dht, connector, aopt, balance);
  auto stop_all = [&] {
    self->request(server.supervisor, std::chrono::seconds(10), close_atom::value)
        .receive([](const ack&) {}, [](caf::error&) {});
    unpublish_from_peers(sys, *port);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  };
  int64_t first = setup.first_block, last = setup.last_block;
  if (balance) {
    // The balancer reads the swarm, chooses the span and loads it.
    const balancer_event placed = watch->first.get_future().get();
    if (placed.kind == balancer_event::failed) {
      stop_all();
      throw std::runtime_error(placed.error);
    }
    first = placed.first;
    last = placed.last;
  } else {
    try {
      load_server_blocks(sys, node, setup, *source);
    } catch (...) {
      stop_all();
      throw;
    }
    self->request(server.parts.announcer, std::chrono::seconds(60), state_atom::value, "online")
        .receive([](const ack&) {}, [](caf::error&) {});  // at once, not at the next period
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "loaded blocks " << first << ":" << last << " in " << load_s << " s on " << node.backend->name()
            << ", KV caches in " << dtype_name(setup.kv_dtype) << "\n";
  std::cout << "serving blocks " << first << ":" << last << " of " << prefix << " at " << address << std::endl;

  const int sig = wait_for_stop_signal();
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(watch->mutex);
    failure = watch->failure;
  }
  if (failure.empty()) std::cerr << "received signal " << sig << ", announcing offline and stopping\n";
  stop_all();
  if (!failure.empty()) throw std::runtime_error(failure);
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
