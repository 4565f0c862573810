#include "sim/world.hpp"

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <deque>
#include <functional>
#include <limits>
#include <ostream>
#include <queue>
#include <random>
#include <typeinfo>
#include <unordered_map>

#include "actors/log/node_log.hpp"
#include "actors/client/client_api.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/protocol/system_config.hpp"
#include "actors/server/node_supervisor.hpp"
#include "actors/server/server_node.hpp"
#include "actors/server/throughput.hpp"
#include "actors/trust/node_identity.hpp"
#include "model/block.hpp"
#include "model/client_head.hpp"
#include "sim/cost_backend.hpp"
#include "sim/network.hpp"
#include "sim/sim_clock.hpp"
#include "sim/sim_connector.hpp"
#include "sim/sim_link.hpp"
#include "sim/synthetic_weights.hpp"

namespace corolla::sim {
namespace {

struct sim_system_config : caf::actor_system_config {
  sim_system_config() {
    add_corolla_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    module_factories.push_back([](caf::actor_system& sys) -> caf::actor_system::module* {
      return new sim_coordinator(sys);  // CAF's deterministic scheduler on the simulation's clock
    });
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

using time_point = caf::actor_clock::time_point;

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

using retry_open_atom = caf::atom_constant<caf::atom("reopen")>;


// How often a workload session tries to open before it gives up (a person retrying), and the pause between.
constexpr int kOpenAttempts = 6;
constexpr double kOpenRetryS = 20;

}  // namespace

struct World::impl {
  scenario sc;
  uint64_t seed;
  Network net;  // before the actor system: links use it until the system's last timers have fired
  std::shared_ptr<CostBackend> client_backend;  // before the actor system too: the clients' heads compute on it
  sim_system_config cfg;
  caf::actor_system sys{cfg};
  sim_coordinator& sched = dynamic_cast<sim_coordinator&>(sys.scheduler());
  time_point origin;
  EventLog log;
  sim_results res;
  // Per swarm (a model of the scenario's shape; servers and clients are dealt to the swarms in turn): its
  // weights, whose name is the swarm's prefix in the DHT, and the clients' head.
  std::vector<std::shared_ptr<SyntheticWeights>> sources;
  std::vector<std::shared_ptr<const ClientHead>> heads;
  std::mt19937_64 rng;
  bool shutting_down = false;

  struct server {
    server_record rec;
    const server_class* cls = nullptr;
    node_index node = 0;
    std::shared_ptr<CostBackend> backend;
    int64_t cache_tokens = 0;
    size_t swarm = 0;
    caf::actor connector, dht, gate, supervisor;
    std::shared_ptr<const SigningKey> identity;
    bool started = false, serving = false, frozen = false, gone = false;
  };
  std::deque<server> servers;
  struct client {
    node_index node = 0;
    size_t swarm = 0;
    caf::actor connector, swarm_client;
  };
  std::vector<client> clients;
  std::vector<caf::actor> drivers;
  std::vector<std::string> bootstrap;  // the servers every node bootstraps from (a config's initial peers)

  struct world_event {
    time_point t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const world_event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<world_event, std::vector<world_event>, std::greater<>> events;
  uint64_t next_seq = 0;
  int64_t tokens_total = 0;
  uint64_t events_run = 0;

  impl(scenario s, uint64_t sd) : sc(std::move(s)), seed(sd), net(sc.network, sd), rng(sd) {
    sched.clock().current_time += std::chrono::hours(1);  // time 0 is not special
    origin = sched.clock().now();
    log.set_origin(origin);
    net.set_origin(origin);
    res.scenario = sc.name;
    res.source = sc.source;
    res.seed = seed;
    res.duration_s = sc.duration_s;
    res.blocks = sc.model.blocks;
    client_backend = make_cost_backend({});
    for (int64_t k = 0; k < sc.model.swarms; ++k) {
      const std::string prefix = sc.model.swarms == 1 ? "sim" : "sim-" + std::to_string(k);
      sources.push_back(std::make_shared<SyntheticWeights>(sc.model.config(), sc.model.dtype, prefix));
      heads.push_back(std::make_shared<ClientHead>(*sources.back(), *client_backend));
    }
    plan_servers();
    plan_clients();
    plan_sessions();
    plan_churn();
    at(0, [this] { sample(); });
  }

  ~impl() {
    shutting_down = true;
    for (auto& s : servers)
      for (auto* a : {&s.supervisor, &s.gate, &s.dht, &s.connector})
        if (*a) caf::anon_send_exit(*a, caf::exit_reason::kill);
    for (auto& c : clients)
      for (auto* a : {&c.swarm_client, &c.connector})
        if (*a) caf::anon_send_exit(*a, caf::exit_reason::kill);
    for (auto& d : drivers) caf::anon_send_exit(d, caf::exit_reason::kill);
    sched.run();
    sys.await_actors_before_shutdown(false);
  }

  double now_s() const { return log.seconds(sched.clock().now()); }
  void note(const std::string& kind, const std::string& details) { log.add(sched.clock().now(), kind, details); }
  void at(double s, std::function<void()> fn) { events.push({origin + timespan_of(s), next_seq++, std::move(fn)}); }
  double uniform(double a, double b) { return a < b ? std::uniform_real_distribution<double>(a, b)(rng) : a; }

  // --- servers ---------------------------------------------------------------------------------------------------

  void add_server(const server_class& cls, double start_s) {
    server& s = servers.emplace_back();
    s.cls = &cls;
    s.rec.address = "srv-" + std::to_string(servers.size() - 1);
    s.swarm = (servers.size() - 1) % sources.size();
    s.rec.swarm = sources[s.swarm]->origin();
    s.rec.server_class = cls.name;
    s.rec.region = cls.region;
    s.rec.start_s = start_s;
    s.rec.tflops = cls.efficiency * cls.tflops * uniform(1 - cls.jitter, 1 + cls.jitter);
    s.rec.bandwidth_gbs = cls.efficiency * cls.memory_bandwidth_gbs * uniform(1 - cls.jitter, 1 + cls.jitter);
    s.backend = make_cost_backend({s.rec.tflops * 1e12, s.rec.bandwidth_gbs * 1e9, cls.op_overhead_us * 1e-6});
    const double block = sc.model.block_bytes();
    const double memory = cls.memory_gb * 1e9;
    s.rec.num_blocks = cls.num_blocks > 0 ? cls.num_blocks : static_cast<int64_t>(0.85 * memory / block);
    s.rec.num_blocks = std::clamp<int64_t>(s.rec.num_blocks, 1, sc.model.blocks);
    const double kv_token = static_cast<double>(kv_bytes_per_token(sc.model.config()));
    const double left = memory - block * static_cast<double>(s.rec.num_blocks);
    s.cache_tokens = cls.cache_tokens > 0 ? cls.cache_tokens
                     : memory > 0 ? std::max<int64_t>(static_cast<int64_t>(left / (kv_token * static_cast<double>(s.rec.num_blocks))), 0)
                                  : 8192;
    measure_rates(s);
  }

  // The rates a server would measure at start (throughput.hpp), here in modelled time: one block of the model
  // on the server's cost backend, a single-token step at position 128 and a 1024-token forward.
  void measure_rates(server& s) {
    auto block = load_block(*sources[0], 0, *s.backend);
    const int64_t d = sc.model.hidden_size;
    KVCache cache = block->make_cache(1, 129);
    Tensor one = s.backend->alloc(DType::f32, {1, 1, d});
    std::vector<int32_t> at{128};
    take_modelled_time(*s.backend);
    block->forward(one, at, &cache);
    const double t_inference = std::chrono::duration<double>(take_modelled_time(*s.backend)).count();
    Tensor batch = s.backend->alloc(DType::f32, {1, 1024, d});
    std::vector<int32_t> positions(1024);
    for (int32_t i = 0; i < 1024; ++i) positions[static_cast<size_t>(i)] = i;
    block->forward(batch, positions, nullptr);
    const double t_forward = std::chrono::duration<double>(take_modelled_time(*s.backend)).count();
    s.rec.inference_rps = 1.0 / t_inference;
    s.rec.forward_rps = 1024.0 / t_forward;
    const double link_mbps = s.cls->bandwidth_mbps > 0 ? s.cls->bandwidth_mbps : sc.network.bandwidth_mbps;
    const double network_rps = link_mbps * 1e6 / 8.0 / (4.0 * static_cast<double>(d));
    s.rec.throughput = announced_throughput(s.rec.forward_rps, network_rps, s.rec.num_blocks);
  }

  void plan_servers() {
    for (const auto& cls : sc.servers)
      for (int64_t i = 0; i < cls.count; ++i) {
        const double spread = cls.count > 1 ? cls.start_spread_s * static_cast<double>(i) / static_cast<double>(cls.count) : 0;
        add_server(cls, cls.start_s + spread);
      }
    for (size_t i = 0; i < std::min<size_t>(3, servers.size()); ++i) bootstrap.push_back(servers[i].rec.address);
    for (size_t i = 0; i < servers.size(); ++i) at(servers[i].rec.start_s, [this, i] { start_server(i); });
  }

  server_setup setup_of(const server& s, size_t i) const {
    server_setup setup;
    setup.model = sources[s.swarm]->origin();
    setup.backend = s.backend;
    setup.throughput.throughput = s.rec.throughput;
    setup.throughput.inference_rps = s.rec.inference_rps;
    setup.throughput.forward_rps = s.rec.forward_rps;
    setup.throughput.source = "modelled";
    setup.public_name = s.rec.address;
    setup.cache_tokens = s.cache_tokens;
    setup.max_sessions = 1 << 20;
    setup.max_batch_tokens = s.cls->max_batch_tokens;
    setup.seed = seed * 7919 + i;
    setup.detached = false;
    return setup;
  }

  void start_server(size_t i) {
    server& s = servers[i];
    s.node = net.add_node(s.rec.address, s.rec.region, s.cls->bandwidth_mbps);
    s.connector = spawn_sim_connector(sys, net, s.node);
    // The server's key from the world's random stream (runs stay deterministic); its DHT id is derived from it.
    KeySeed key_seed;
    for (auto& b : key_seed) b = static_cast<uint8_t>(rng());
    s.identity = std::make_shared<const SigningKey>(SigningKey::from_seed(key_seed));
    dht_options d;
    d.id = dht_id_of(s.identity->public_key());
    d.address = s.rec.address;
    s.dht = spawn_dht_node(sys, d, s.connector);
    server_setup setup = setup_of(s, i);
    setup.dht = s.dht;
    setup.identity = s.identity;
    server_node node = start_server_node(sys, setup, s.connector, sources[s.swarm], false);
    s.gate = node.gate;
    s.started = true;
    net.publish(s.rec.address, s.node, s.gate, s.dht);
    caf::send_as(s.gate, s.gate, address_atom::value, s.rec.address);  // from its own node, as a server does
    note("server-start", s.rec.address + " class=" + s.rec.server_class + " region=" + s.rec.region +
                             " blocks=" + std::to_string(s.rec.num_blocks) + " inference_rps=" + fmt(s.rec.inference_rps) +
                             " throughput=" + fmt(s.rec.throughput));
    std::vector<std::string> peers;
    for (size_t j = 0; j < bootstrap.size(); ++j)
      if (j != i && servers[j].started && !servers[j].gone) peers.push_back(bootstrap[j]);
    if (peers.empty()) return start_parts(i, node, setup);
    caf::actor dht = s.dht;
    drivers.push_back(sys.spawn([this, i, node, setup, peers, dht](caf::event_based_actor* self) {
      self->request(dht, std::chrono::seconds(60), dht_bootstrap{peers})
          .then([=, this](const dht_bootstrap_reply&) { start_parts(i, node, setup); },
                [=, this](caf::error& e) {
                  note("server-bootstrap-failed", servers[i].rec.address + " " + describe(e));
                  start_parts(i, node, setup);
                });
    }));
  }

  void start_parts(size_t i, const server_node& node, const server_setup& setup) {
    server& s = servers[i];
    if (s.gone) return;
    announcer_options a;
    a.identity = s.identity;
    a.model_prefix = sources[s.swarm]->origin();
    a.period = timespan_of(sc.announce_period_s);
    balancer_options b;
    b.model_prefix = sources[s.swarm]->origin();
    b.num_blocks = s.rec.num_blocks;
    b.balance_quality = sc.balance_quality;
    b.mean_check_period = timespan_of(sc.mean_balance_check_s);
    b.seed = seed * 104729 + i;
    b.on_event = [this, i](const balancer_event& e) { on_balancer(i, e); };
    auto parts = start_server_parts(sys, node, setup, sources[s.swarm], s.dht, s.connector, a, b);
    s.supervisor = parts.supervisor;
    s.supervisor->attach_functor([this, i](const caf::error&) { on_server_exit(i); });
  }

  void on_balancer(size_t i, const balancer_event& e) {
    server& s = servers[i];
    const std::string span = std::to_string(e.first) + ".." + std::to_string(e.last - 1);
    switch (e.kind) {
      case balancer_event::placed:
        s.serving = true;
        s.rec.first_block = e.first;
        s.rec.last_block = e.last;
        note("server-placed", s.rec.address + " blocks=" + span);
        break;
      case balancer_event::moved:
        ++s.rec.moves;
        s.rec.first_block = e.first;
        s.rec.last_block = e.last;
        note("server-moved", s.rec.address + " blocks=" + span);
        break;
      case balancer_event::failed: note("server-failed", s.rec.address + " " + e.error); break;
      case balancer_event::checked: break;
    }
  }

  void on_server_exit(size_t i) {
    if (shutting_down) return;
    server& s = servers[i];
    s.serving = false;
    if (!s.gone) {  // a graceful leave finished (a crash marks itself)
      s.gone = true;
      s.rec.fate = "left";
      s.rec.end_s = now_s();
      net.crash(s.node);  // nothing listens at its address any more
      note("server-left", s.rec.address);
    }
  }

  // Live servers (started, not gone).
  std::vector<size_t> live_servers() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < servers.size(); ++i)
      if (servers[i].started && !servers[i].gone) out.push_back(i);
    return out;
  }

  void crash(size_t i) {
    server& s = servers[i];
    if (!s.started || s.gone) return;
    s.gone = true;
    s.serving = false;
    s.rec.fate = "crashed";
    s.rec.end_s = now_s();
    net.crash(s.node);
    note("server-crash", s.rec.address);
    for (auto* a : {&s.supervisor, &s.gate, &s.dht})
      if (*a) caf::anon_send_exit(*a, caf::exit_reason::kill);
  }

  void leave(size_t i) {
    server& s = servers[i];
    if (!s.started || s.gone || !s.supervisor) return;
    note("server-leave", s.rec.address);
    caf::anon_send(s.supervisor, close_atom::value);
  }

  void isolate(const std::vector<caf::strong_actor_ptr>& links, const std::string& why) {
    for (const auto& l : links)
      bring_link_down(sys, l, timespan_of(net.connection_timeout_s()), make_error(errc::peer_unavailable, why));
  }

  void freeze(size_t i, double duration) {
    server& s = servers[i];
    if (!s.started || s.gone || s.frozen) return;
    s.frozen = true;
    net.set_frozen(s.node, true);
    note("server-freeze", s.rec.address + " for=" + fmt(duration));
    isolate(net.links_touching(s.node), s.rec.address + " stopped answering");
    at(now_s() + duration, [this, i] {
      servers[i].frozen = false;
      net.set_frozen(servers[i].node, false);
      note("server-thaw", servers[i].rec.address);
    });
  }

  void partition(const std::string& region, double duration) {
    const auto r = net.find_region(region);
    if (!r) return;
    net.set_partitioned(*r, true);
    note("partition", "region=" + region + " for=" + fmt(duration));
    isolate(net.links_crossing(*r), "region " + region + " is cut off");
    at(now_s() + duration, [this, r = *r, region] {
      net.set_partitioned(r, false);
      note("partition-healed", "region=" + region);
    });
  }

  // A random live server (for churn drawn at rates), or none.
  std::optional<size_t> pick_live() {
    auto live = live_servers();
    if (live.empty()) return std::nullopt;
    return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
  }

  void plan_churn() {
    const auto& c = sc.churn;
    const auto n = static_cast<double>(servers.size());
    auto schedule = [&](double fraction, std::function<void()> fn) {
      const auto count = static_cast<int64_t>(std::llround(fraction * n));
      for (int64_t k = 0; k < count; ++k) at(uniform(c.start_s, c.start_s + c.within_s), fn);
    };
    schedule(c.crash_fraction, [this] {
      if (auto i = pick_live()) crash(*i);
    });
    schedule(c.leave_fraction, [this] {
      if (auto i = pick_live()) leave(*i);
    });
    schedule(c.freeze_fraction, [this] {
      if (auto i = pick_live()) freeze(*i, sc.churn.freeze_s);
    });
    for (const auto& e : c.events) {
      at(e.at_s, [this, e] {
        std::optional<size_t> i;
        if (e.server >= 0 && static_cast<size_t>(e.server) < servers.size()) i = static_cast<size_t>(e.server);
        else if (e.kind != "partition" && e.kind != "join") i = pick_live();
        if (e.kind == "crash" && i) crash(*i);
        else if (e.kind == "leave" && i) leave(*i);
        else if (e.kind == "freeze" && i) freeze(*i, e.duration_s);
        else if (e.kind == "partition") partition(e.region, e.duration_s);
        else if (e.kind == "join") join(e.server_class);
      });
    }
  }

  void join(const std::string& class_name) {
    for (const auto& cls : sc.servers)
      if (cls.name == class_name) {
        add_server(cls, now_s());
        start_server(servers.size() - 1);
        return;
      }
    note("join-skipped", "no server class '" + class_name + "'");
  }

  // --- clients and sessions --------------------------------------------------------------------------------------

  void plan_clients() {
    const auto& w = sc.workload;
    for (int64_t i = 0; i < w.clients; ++i) {
      const std::string& region = w.regions[static_cast<size_t>(i) % w.regions.size()];
      const std::string name = "client-" + std::to_string(i);
      client c;
      c.node = net.add_node(name, region, 0);
      c.swarm = static_cast<size_t>(i) % sources.size();
      clients.push_back(c);
    }
  }

  void start_client(size_t i) {
    client& c = clients[i];
    if (c.swarm_client) return;
    const auto& w = sc.workload;
    c.connector = spawn_sim_connector(sys, net, c.node);
    swarm_client_options o;
    o.initial_peers = bootstrap;
    o.model_prefix = sources[c.swarm]->origin();
    o.mode = w.mode == "push" ? route_mode::push : route_mode::relay;
    o.request_timeout = timespan_of(w.request_timeout_s);
    o.recovery_timeout = timespan_of(w.recovery_timeout_s);
    o.spot_checks.every = w.spot_check_every;
    o.spot_checks.new_servers = w.spot_check_every > 0;
    for (auto& b : o.dht_id) b = static_cast<uint8_t>(rng());
    c.swarm_client = spawn_swarm_client(sys, o, heads[c.swarm], c.connector);
  }

  void plan_sessions() {
    const auto& w = sc.workload;
    double t = w.start_s;
    for (int64_t k = 0; k < w.sessions; ++k) {
      if (w.arrival_rate_per_s > 0) t += std::exponential_distribution<double>(w.arrival_rate_per_s)(rng);
      session_record r;
      r.id = static_cast<size_t>(k);
      r.client = static_cast<size_t>(k % w.clients);
      r.arrival_s = t;
      r.prompt_tokens = w.prompt_tokens_max > w.prompt_tokens
                            ? std::uniform_int_distribution<int64_t>(w.prompt_tokens, w.prompt_tokens_max)(rng)
                            : w.prompt_tokens;
      r.new_tokens = w.new_tokens_max > w.new_tokens
                         ? std::uniform_int_distribution<int64_t>(w.new_tokens, w.new_tokens_max)(rng)
                         : w.new_tokens;
      res.sessions.push_back(r);
      at(t, [this, k] { start_session(static_cast<size_t>(k)); });
    }
  }

  void start_session(size_t k) {
    session_record& r = res.sessions[k];
    start_client(r.client);
    note("session-arrive", "session=" + std::to_string(k) + " client=" + std::to_string(r.client) +
                               " prompt=" + std::to_string(r.prompt_tokens) + " new=" + std::to_string(r.new_tokens));
    std::vector<int32_t> prompt(static_cast<size_t>(r.prompt_tokens));
    for (auto& id : prompt) id = static_cast<int32_t>(1 + rng() % static_cast<uint64_t>(sc.model.vocab_size - 2));
    drivers.push_back(sys.spawn([this, k, prompt](caf::event_based_actor* self) -> caf::behavior {
      open_session_for(self, k, prompt);
      return {
          [=, this](token_atom, int32_t) {
            auto& r = res.sessions[k];
            const double t = now_s();
            if (r.first_token_s < 0) r.first_token_s = t;
            r.token_s.push_back(t);
            ++tokens_total;
            if (sc.log_steps) note("token", "session=" + std::to_string(k) + " n=" + std::to_string(r.token_s.size()));
          },
          [=, this](retry_open_atom) { open_session_for(self, k, prompt); },
      };
    }));
  }

  void open_session_for(caf::event_based_actor* self, size_t k, std::vector<int32_t> prompt) {
    auto& r = res.sessions[k];
    ++r.open_attempts;
    const auto& w = sc.workload;
    caf::actor swarm = clients[r.client].swarm_client;
    self->request(swarm, timespan_of(w.request_timeout_s * 20), open_session_request{w.max_length})
        .then(
            [=, this](caf::actor session) {
              res.sessions[k].opened_s = now_s();
              note("session-open", "session=" + std::to_string(k));
              generate(self, k, session, prompt);
            },
            [=, this](caf::error& e) {
              auto& r = res.sessions[k];
              note("session-open-failed", "session=" + std::to_string(k) + " attempt=" +
                                              std::to_string(r.open_attempts) + " " + describe(e));
              if (r.open_attempts >= kOpenAttempts) return end_session(self, k, {}, describe(e));
              self->delayed_send(self, timespan_of(kOpenRetryS), retry_open_atom::value);
            });
  }

  void generate(caf::event_based_actor* self, size_t k, caf::actor session, std::vector<int32_t> prompt) {
    GenerationParams params;
    params.max_new_tokens = res.sessions[k].new_tokens;
    params.stop_at_eos = false;
    self->request(session, timespan_of(sc.duration_s * 4), generate_request{prompt, params, caf::actor_cast<caf::actor>(self)})
        .then([=, this](const generate_result&) { end_session(self, k, session, {}); },
              [=, this](caf::error& e) { end_session(self, k, session, describe(e)); });
  }

  void end_session(caf::event_based_actor* self, size_t k, caf::actor session, std::string error) {
    auto finish = [=, this](session_stats stats) {
      auto& r = res.sessions[k];
      r.done_s = now_s();
      r.ok = error.empty();
      r.error = error;
      r.steps = stats.steps;
      r.recovery_s = stats.recovery_seconds;
      r.failures = stats.failures;
      note(r.ok ? "session-done" : "session-failed",
           "session=" + std::to_string(k) + " tokens=" + std::to_string(r.token_s.size()) +
               " failovers=" + std::to_string(r.recovery_s.size()) + (r.ok ? "" : " error=" + error));
      if (session) self->send(session, close_atom::value);
      self->quit();
    };
    if (!session) return finish({});
    self->request(session, std::chrono::seconds(60), stats_atom::value)
        .then([=](const session_stats& s) { finish(s); }, [=](caf::error&) { finish({}); });
  }

  // --- the swarm over time ---------------------------------------------------------------------------------------

  double sample_period() const { return std::max(5.0, sc.duration_s / 120.0); }

  void sample() {
    swarm_sample s;
    s.t_s = now_s();
    const auto blocks = static_cast<size_t>(sc.model.blocks);
    std::vector<std::vector<int64_t>> count(sources.size(), std::vector<int64_t>(blocks, 0));
    std::vector<std::vector<double>> capacity(sources.size(), std::vector<double>(blocks, 0.0));
    for (const auto& srv : servers) {
      if (!srv.serving || srv.gone || srv.frozen) continue;
      ++s.servers_online;
      for (int64_t b = srv.rec.first_block; b < srv.rec.last_block; ++b) {
        ++count[srv.swarm][static_cast<size_t>(b)];
        capacity[srv.swarm][static_cast<size_t>(b)] += srv.rec.inference_rps;
      }
    }
    // Of several swarms, each block's figures are its weakest swarm's.
    s.block_servers = count[0];
    s.block_capacity = capacity[0];
    for (size_t k = 1; k < sources.size(); ++k)
      for (size_t b = 0; b < blocks; ++b) {
        s.block_servers[b] = std::min(s.block_servers[b], count[k][b]);
        s.block_capacity[b] = std::min(s.block_capacity[b], capacity[k][b]);
      }
    s.tokens_total = tokens_total;
    res.samples.push_back(std::move(s));
    at(now_s() + sample_period(), [this] { sample(); });
  }

  // --- the loop --------------------------------------------------------------------------------------------------

  void run(std::ostream* progress) {
    const auto wall0 = std::chrono::steady_clock::now();
    sim_clock& clock = sched.clock();
    const time_point end = origin + timespan_of(sc.duration_s);
    const time_point never = time_point::max();
    double next_progress = 0;
    std::unordered_map<const char*, uint64_t> by_actor;  // names are static strings: keyed by pointer
    // An actor's name is its type's (a stateful actor's State::name): its counter is looked up once per type, by
    // the address of the type's type_info (a type_index would hash the type's name on every event).
    std::unordered_map<const std::type_info*, uint64_t*> counter_of_type;
    for (;;) {
      while (!sched.jobs.empty()) {
        caf::resumable* job = sched.jobs.front();
        auto [counted, fresh] = counter_of_type.try_emplace(&typeid(*job), nullptr);
        if (fresh) {
          auto* actor = dynamic_cast<caf::local_actor*>(job);
          counted->second = &by_actor[actor ? actor->name() : "other"];
        }
        ++*counted->second;
        sched.run_once();
        ++events_run;
      }
      const time_point next_timer = clock.next_due();
      const time_point next_world = events.empty() ? never : events.top().t;
      const time_point next = std::min(next_timer, next_world);
      if (next == never || next > end) break;
      if (next_world <= next_timer) {
        world_event e = events.top();
        events.pop();
        if (clock.current_time < e.t) clock.current_time = e.t;
        e.fn();
      } else {
        clock.fire_next();
      }
      ++events_run;
      if (progress && now_s() >= next_progress) {
        *progress << "sim: t=" << fmt(now_s()) << " s, " << events_run << " events, "
                  << std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count() << " s wall\n";
        next_progress = now_s() + sc.duration_s / 10;
      }
    }
    if (clock.current_time < end) clock.current_time = end;
    for (size_t i = 0; i < servers.size(); ++i) res.servers.push_back(servers[i].rec);
    res.traffic = net.traffic();
    res.log_lines = log.lines();
    for (const auto& [name, n] : by_actor) res.cost.events_by_actor[name] += n;
    res.cost.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    res.cost.events = events_run;
    res.cost.events_per_s = res.cost.wall_s > 0 ? static_cast<double>(events_run) / res.cost.wall_s : 0;
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    res.cost.peak_rss_mb = static_cast<double>(u.ru_maxrss) / 1024.0;
  }
};

World::World(scenario sc, uint64_t seed) : impl_(std::make_unique<impl>(std::move(sc), seed)) {
  // The actors' operator logs would speak for thousands of nodes on wall-clock time; the event log says what
  // happens here, in virtual time.
  log::configure("off");
}
World::~World() = default;
void World::run(std::ostream* progress) { impl_->run(progress); }
const sim_results& World::results() const { return impl_->res; }
const EventLog& World::log() const { return impl_->log; }

}  // namespace corolla::sim
