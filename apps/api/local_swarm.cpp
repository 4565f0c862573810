#include "apps/api/local_swarm.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <random>
#include <set>

#include "actors/net/peer_gateway.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/server/announcer.hpp"
#include "actors/server/node_supervisor.hpp"
#include "actors/server/server_node.hpp"
#include "actors/server/throughput.hpp"
#include "actors/trust/node_identity.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla::api {
namespace {

NodeId random_node_id() {
  std::random_device rd;
  NodeId id{};
  for (auto& b : id) b = static_cast<uint8_t>(rd());
  return id;
}

}  // namespace

LocalSwarm::LocalSwarm(caf::actor_system& sys, caf::actor connector, LocalSwarmOptions o)
    : sys_(sys), connector_(std::move(connector)) {
  auto source = open_weights(o.model);
  const int64_t total = source->config().num_layers;
  if (o.servers < 1 || o.servers > total)
    throw std::runtime_error("a local swarm of " + std::to_string(o.servers) + " servers cannot split " +
                             std::to_string(total) + " blocks");
  swarm_id_ = default_model_prefix(*source);
  // The servers' compute rates, measured once for all (they run the same blocks on the same kind of backend) and
  // briefly (a local swarm starts in seconds; serve's longer measurement is cached in its store, which a local swarm
  // does not keep): what /health shows and balancing would sum.
  const compute_rates rates = measure_compute_rates(
      *source, *make_cpu_backend(o.threads), std::nullopt,
      measure_limits{.inference_steps = 20, .forward_steps = 2, .forward_tokens = 256, .seconds_each = 0.5});
  caf::scoped_actor self{sys_};
  // Makes an actor reachable at an address: a loopback port when publishing works, else an in-process name.
  auto place = [&](const caf::actor& a, const std::string& name, uint16_t* port_out) {
    std::string address = "inproc:" + name;
    if (o.publish) {
      auto port = publish_to_peers(sys_, a, o.host, 0);
      if (port) {
        address = o.host + ":" + std::to_string(*port);
        *port_out = *port;
      }
    }
    self->send(connector_, register_atom::value, address, a);
    return address;
  };
  auto bootstrap = [&](const dht_node_actor& dht, const std::string& peer) {
    caf::error failure;
    self->request(dht, std::chrono::seconds(60), dht_bootstrap{{peer}})
        .receive([](const dht_bootstrap_reply&) {}, [&](caf::error& e) { failure = std::move(e); });
    if (failure) throw std::runtime_error("joining the local DHT: " + describe(failure));
  };

  dht_options dopt;
  dopt.id = random_node_id();
  dht_ = spawn_dht_node(sys_, dopt, connector_);
  dht_address_ = place(caf::actor_cast<caf::actor>(dht_), "dht", &dht_port_);
  self->send(dht_, address_atom::value, dht_address_);

  for (int i = 0; i < o.servers; ++i) {
    server_setup setup;
    setup.model = source->origin();
    setup.first_block = total * i / o.servers;
    setup.last_block = total * (i + 1) / o.servers;
    setup.public_name = "local-" + std::to_string(i);
    setup.cache_tokens = o.cache_tokens;
    setup.kv_dtype = o.kv_dtype;
    setup.max_sessions = o.max_sessions;
    setup.max_batch_tokens = o.max_batch_tokens;
    setup.threads = o.threads;
    setup.seed = std::random_device{}();
    setup.throughput = {announced_throughput(rates.forward_rps, 0, setup.last_block - setup.first_block),
                        rates.inference_rps, rates.forward_rps, 0, "measured"};
    // Each server its own key, drawn afresh (a local swarm keeps no store): it signs the server's records, and
    // the server's DHT id is derived from it.
    auto identity = std::make_shared<const SigningKey>(SigningKey::generate());
    dht_options sopt;
    sopt.id = dht_id_of(identity->public_key());
    auto sdht = spawn_dht_node(sys_, sopt, connector_);
    setup.dht = sdht;
    setup.identity = identity;
    bootstrap(sdht, dht_address_);
    server_node node = start_server_node(sys_, setup, connector_, source, false);
    uint16_t port = 0;
    const std::string address = place(caf::actor_cast<caf::actor>(node.gate), "server-" + std::to_string(i), &port);
    ports_.push_back(port);
    gates_.push_back(caf::actor_cast<caf::actor>(node.gate));
    self->send(node.gate, address_atom::value, address);
    self->send(sdht, address_atom::value, address);
    bootstrap(sdht, dht_address_);  // again, now as a full node the others add to their tables
    announcer_options aopt;
    aopt.identity = identity;
    aopt.model_prefix = swarm_id_;
    aopt.period = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(o.announce_period_s));
    auto announcer = spawn_announcer(sys_, aopt, node.gate, sdht, connector_);
    supervisors_.push_back(
        spawn_node_supervisor(sys_, {node.gate, sdht, announcer, {}, {}}));  // no balancer, no loader
    if (o.progress) o.progress(i, setup.first_block, setup.last_block);
    load_server_blocks(sys_, node, setup, *source);
    self->send(announcer, state_atom::value, "online");
    addresses_.push_back(address);
  }

  // Wait until the DHT lists every block as served by an online server (announcements are asynchronous).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::set<int64_t> covered;
    for (int64_t g = 0; g < group_count(total); ++g)
      self->request(dht_, std::chrono::seconds(10), dht_get{group_key(swarm_id_, g)})
          .receive(
              [&](const dht_get_reply& r) {
                for (auto& s : parse_servers(group_key(swarm_id_, g), r.entries, self->clock().now()))
                  if (s.info.state == "online")
                    for (int64_t b = std::max<int64_t>(s.info.first_block, 0); b < std::min(s.info.last_block, total);
                         ++b)
                      covered.insert(b);
              },
              [](caf::error&) {});
    if (static_cast<int64_t>(covered.size()) == total) break;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("the local servers did not show up in the DHT within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

LocalSwarm::~LocalSwarm() { stop(); }

void LocalSwarm::stop() {
  if (supervisors_.empty() && !dht_) return;
  caf::scoped_actor self{sys_};
  for (auto& s : supervisors_)
    self->request(s, std::chrono::seconds(10), close_atom::value).receive([](const ack&) {}, [](caf::error&) {});
  for (size_t i = 0; i < gates_.size(); ++i)
    if (ports_[i]) unpublish_from_peers(sys_, ports_[i]);
  supervisors_.clear();
  gates_.clear();
  if (dht_) {
    if (dht_port_) unpublish_from_peers(sys_, dht_port_);
    self->send_exit(dht_, caf::exit_reason::user_shutdown);
    dht_ = nullptr;
  }
}

}  // namespace corolla::api
