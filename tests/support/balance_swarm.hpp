// A swarm of servers placed by their balancers, all in one process under the deterministic scheduler and virtual
// time: each server is the production assembly (span gate, DHT node, announcer, block loader, balancer, under a
// supervisor; start_server_parts), registered with an in-process connector under "srv-N". The model is the
// llama test model's 4 blocks repeated to `blocks` blocks (views: nothing is copied), so loading is real and
// cheap. Used by the integration test and by bench_balance.
//
//   BalanceSwarm w(24);
//   w.start({{100, 8}, {40, 6}, ...}, options);   // (throughput, num_blocks) each; all at the same instant
//   w.advance(std::chrono::minutes(30));
//   w.min_block() / w.ideal();
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "actors/balance/block_selection.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/net/connector.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/server/node_supervisor.hpp"
#include "actors/trust/node_identity.hpp"
#include "model/weights/tensor_map_source.hpp"
#include "support/deterministic_system.hpp"
#include "support/golden.hpp"

namespace corolla::test {

// The llama test model with its blocks repeated: block i has the weights of block i % 4.
inline std::shared_ptr<WeightSource> repeated_llama(int64_t blocks) {
  auto base = open_weights(model_dir("llama"));
  ModelConfig c = base->config();
  const int64_t have = c.num_layers;
  c.num_layers = blocks;
  std::map<std::string, Tensor> tensors;
  const std::regex layer(R"(^model\.layers\.(\d+)\.(.*)$)");
  for (const auto& name : base->names()) {
    std::smatch m;
    if (!std::regex_match(name, m, layer)) {
      tensors[name] = base->get(name);
      continue;
    }
    const int64_t j = std::stoll(m[1].str());
    for (int64_t i = j; i < blocks; i += have) tensors[block_tensor_name(i, m[2].str())] = base->get(name);
  }
  return std::make_shared<TensorMapSource>(c, std::move(tensors), "llama-x" + std::to_string(blocks));
}

struct swarm_member_spec {
  double throughput = 1;
  int64_t num_blocks = 1;
};

struct swarm_options {
  double balance_quality = 0.75;
  caf::timespan mean_check_period = std::chrono::seconds(60);
  caf::timespan announce_period = std::chrono::seconds(30);
  uint64_t seed = 1;
};

class BalanceSwarm : public DeterministicSystem {
 public:
  struct member {
    size_t index = 0;
    std::string address;
    swarm_member_spec spec;
    caf::actor gate, supervisor;
    dht_node_actor dht;
    std::shared_ptr<const SigningKey> identity;
    std::vector<balancer_event> events;
    size_t moves() const {
      return static_cast<size_t>(std::count_if(
          events.begin(), events.end(), [](const balancer_event& e) { return e.kind == balancer_event::moved; }));
    }
    bool placed() const {
      return std::any_of(events.begin(), events.end(),
                         [](const balancer_event& e) { return e.kind == balancer_event::placed; });
    }
  };

  std::shared_ptr<WeightSource> source;
  std::shared_ptr<Backend> backend = std::shared_ptr<Backend>(make_cpu_backend(1));
  caf::actor connector = own(spawn_connector(sys));
  std::deque<member> members;  // stable addresses: the balancers' callbacks write into them
  const std::string prefix = "balance-test";

  explicit BalanceSwarm(int64_t blocks) : source(repeated_llama(blocks)) {
    step = std::chrono::seconds(1);  // balancing happens over minutes
  }

  int64_t blocks() const { return source->config().num_layers; }

  // Starts servers with the given throughputs and block counts. `together`: every balancer starts at the same
  // instant (they read the DHT before any has announced); otherwise one after the other, each once the previous
  // one is placed.
  void start(const std::vector<swarm_member_spec>& specs, const swarm_options& o, bool together = true) {
    std::vector<member*> fresh;
    for (const auto& spec : specs) fresh.push_back(&add_member(spec, o));
    for (member* m : fresh) {
      start_parts(*m, o);
      if (!together) run_until([&] { return m->placed() || failed(*m); });
    }
    run_until(
        [&] { return std::all_of(fresh.begin(), fresh.end(), [&](member* m) { return m->placed() || failed(*m); }); });
  }

  // Runs the world (moving time) until pred() holds, at most `limit` of virtual time.
  template <class Pred>
  bool run_until(Pred pred, caf::timespan limit = std::chrono::minutes(10)) {
    for (caf::timespan waited{0}; waited <= limit; waited += step) {
      run();
      if (pred()) return true;
      sched.clock().advance_time(step);
    }
    return pred();
  }

  static bool failed(const member& m) {
    return std::any_of(m.events.begin(), m.events.end(),
                       [](const balancer_event& e) { return e.kind == balancer_event::failed; });
  }

  // Every server's own view of itself (its gate's info), not the DHT's.
  std::vector<server_info> infos() {
    std::vector<std::pair<caf::actor, info_request>> reqs;
    for (auto& m : members) reqs.push_back({m.gate, info_request{}});
    std::vector<server_info> out;
    for (auto& r : ask_all<server_info>(reqs))
      if (r) out.push_back(*r);
    return out;
  }

  // Per block: the summed throughput of the servers serving it (online).
  std::vector<double> block_strength() {
    auto all = infos();
    std::erase_if(all, [](const server_info& s) { return s.state != "online"; });
    std::vector<double> t(static_cast<size_t>(blocks()), 0.0);
    for (const auto& s : all)
      for (int64_t b = s.first_block; b < s.last_block; ++b) t[static_cast<size_t>(b)] += s.throughput;
    return t;
  }
  double min_block() {
    auto t = block_strength();
    return *std::min_element(t.begin(), t.end());
  }
  // The best any placement can do: every server's throughput times its blocks, spread evenly over the blocks.
  double ideal() const {
    double sum = 0;
    for (const auto& m : members) sum += m.spec.throughput * static_cast<double>(m.spec.num_blocks);
    return sum / static_cast<double>(blocks());
  }
  size_t moves() const {
    size_t n = 0;
    for (const auto& m : members) n += m.moves();
    return n;
  }

 private:
  member& add_member(const swarm_member_spec& spec, const swarm_options& o) {
    member& m = members.emplace_back();
    m.index = members.size() - 1;
    m.spec = spec;
    m.address = "srv-" + std::to_string(m.index);
    std::mt19937_64 rng(o.seed * 1000003 + m.index);
    KeySeed seed;
    for (auto& b : seed) b = static_cast<uint8_t>(rng());
    m.identity = std::make_shared<const SigningKey>(SigningKey::from_seed(seed));
    dht_options d;
    d.id = dht_id_of(m.identity->public_key());
    d.address = m.address;
    m.dht = spawn_dht_node(sys, d, connector);
    server_setup setup = setup_of(m, o);
    setup.dht = m.dht;
    setup.identity = m.identity;
    m.gate = caf::actor_cast<caf::actor>(start_server_node(sys, setup, connector, source, false).gate);
    caf::anon_send(connector, register_atom::value, m.address, m.gate);
    caf::send_as(m.gate, m.gate, address_atom::value, m.address);  // from its own node, as a server does
    run();
    if (members.size() > 1) {
      auto r = ask<dht_bootstrap_reply>(m.dht, dht_bootstrap{{members.front().address}});
      if (!r) throw std::runtime_error("bootstrap of " + m.address + ": " + describe(r.error()));
    }
    return m;
  }

  server_setup setup_of(const member& m, const swarm_options& o) const {
    server_setup setup;
    setup.model = source->origin();
    setup.backend = backend;
    setup.throughput.throughput = m.spec.throughput;
    setup.cache_tokens = 256;
    setup.seed = o.seed * 7919 + m.index;
    setup.detached = false;  // one scheduler thread runs everything
    return setup;
  }

  void start_parts(member& m, const swarm_options& o) {
    announcer_options a;
    a.identity = m.identity;
    a.model_prefix = prefix;
    a.period = o.announce_period;
    balancer_options b;
    b.model_prefix = prefix;
    b.num_blocks = m.spec.num_blocks;
    b.balance_quality = o.balance_quality;
    b.mean_check_period = o.mean_check_period;
    b.seed = o.seed * 104729 + m.index;
    b.on_event = [events = &m.events](const balancer_event& e) { events->push_back(e); };
    server_node node;
    node.gate = caf::actor_cast<span_gate_node>(m.gate);
    node.backend = backend;
    auto parts = start_server_parts(sys, node, setup_of(m, o), source, m.dht, connector, a, b);
    m.supervisor = own(parts.supervisor);
  }
};

}  // namespace corolla::test
