// corolla dht: a bootstrap-only DHT node (it stores and routes, hosts no blocks) until SIGINT/SIGTERM. It prints
// "dht node at HOST:PORT": the address other nodes take as --initial_peers.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <iostream>
#include <random>

#include "actors/net/peer_gateway.hpp"
#include "actors/net/peer_tls.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/store/node_store.hpp"
#include "actors/trust/node_identity.hpp"
#include "apps/corolla/commands.hpp"
#include "apps/corolla/node_flags.hpp"
#include "apps/corolla/stop_waiting_on_error.hpp"
#include "apps/corolla/wait_for_signal.hpp"

namespace corolla::cli {
namespace {

struct DhtFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  std::vector<std::string> initial_peers;
  std::string data_dir;
  peer_limits peers;
  std::string announce_address;
  SwarmCredentials credentials;  // the flags
  CLI::App* cmd = nullptr;
};

int run(const DhtFlags& f) {
  block_stop_signals();
  dht_options opt;
  std::unique_ptr<NodeStore> store;
  if (!f.data_dir.empty()) {
    store = std::make_unique<NodeStore>(f.data_dir);
    opt.id = dht_id_of(node_identity(*store).public_key());  // the same id across restarts
  } else {
    std::random_device rd;
    for (auto& b : opt.id) b = static_cast<uint8_t>(rd());
  }

  corolla_config sys_cfg;
  sys_cfg.peers = f.peers;
  sys_cfg.tls = PeerTls::make(credentials_from_flags(*f.cmd, f.credentials));
  if (sys_cfg.tls) std::cerr << "TLS on peer links: " << sys_cfg.tls->description() << "\n";
  caf::actor_system sys{sys_cfg};
  stop_waiting_on_error unwinding{sys};
  caf::scoped_actor self{sys};
  auto connector = spawn_connector(sys);
  auto node = spawn_dht_node(sys, opt, connector);
  auto stop = [&] {
    self->send_exit(node, caf::exit_reason::user_shutdown);
    self->send_exit(connector, caf::exit_reason::user_shutdown);
  };

  auto port = publish_to_peers(sys, caf::actor_cast<caf::actor>(node), f.host, static_cast<uint16_t>(f.port));
  if (!port) {
    stop();
    throw std::runtime_error(listen_error_text(port.error()));
  }
  const std::string address = f.announce_address.empty() ? f.host + ":" + std::to_string(*port) : f.announce_address;
  self->send(node, address_atom::value, address);

  if (!f.initial_peers.empty()) {
    caf::error failed;
    self->request(node, opt.lookup_timeout * 4, dht_bootstrap{f.initial_peers})
        .receive(
            [&](const dht_bootstrap_reply& r) {
              std::cerr << "joined through " << r.answered.size() << " of " << f.initial_peers.size()
                        << " initial peers; " << r.contacts << " contacts\n";
            },
            [&](caf::error& e) { failed = std::move(e); });
    if (failed) {
      unpublish_from_peers(sys, *port);
      stop();
      std::cerr << "error: " << describe(failed) << "\n";
      return 1;
    }
  }
  std::cerr << "node id " << id_hex(opt.id) << "\n";
  std::cout << "dht node at " << address << std::endl;

  const int sig = wait_for_stop_signal();
  std::cerr << "received signal " << sig << ", stopping\n";
  unpublish_from_peers(sys, *port);
  stop();
  return 0;
}

// A CLI11 check of a "HOST:PORT" value.
std::string host_port(const std::string& s) {
  std::string host;
  uint16_t port = 0;
  return parse_address(s, host, port) ? std::string() : "'" + s + "' is not HOST:PORT";
}

}  // namespace

Runner add_dht(CLI::App& app) {
  auto f = std::make_shared<DhtFlags>();
  auto* cmd = app.add_subcommand("dht", "Run a DHT node that only stores and routes (a bootstrap peer for the swarm)");
  cmd->add_option("--host", f->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", f->port, "Port to listen on; 0 picks a free one (default 0)")->check(CLI::Range(0, 65535));
  cmd->add_option("--initial_peers", f->initial_peers,
                  "HOST:PORT of DHT nodes already in the swarm (several, separated by commas or spaces)")
      ->delimiter(',')
      ->transform(multiaddr_as_host_port())
      ->check(host_port, "")
      ->type_name("HOST:PORT");
  cmd->add_option("--data_dir", f->data_dir,
                  "Directory of the node's database, which keeps its id across restarts "
                  "(default: none, a new id each run)")
      ->type_name("DIR");
  cmd->add_option("--max_peer_connections", f->peers.max_connections, "Open peer connections (default 512)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max_peer_connections_per_address", f->peers.max_connections_per_address,
                  "Peer connections from one IP address (default 64)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--peer_connections_per_second", f->peers.new_connections_per_second,
                  "New peer connections accepted per second from one IP address (default 20)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--announce_address", f->announce_address,
                  "HOST:PORT other nodes dial to reach this one, when not --host and the port listened on")
      ->check(host_port, "")
      ->type_name("HOST:PORT");
  add_credential_flags(*cmd, f->credentials);
  f->cmd = cmd;
  return [f] { return run(*f); };
}

}  // namespace corolla::cli
