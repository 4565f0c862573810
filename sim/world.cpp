#include "sim/world.hpp"

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
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
#include "actors/client/training_api.hpp"
#include "actors/dht/dht_api.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/dht/read_swarm.hpp"
#include "actors/dht/rpc.hpp"
#include "actors/protocol/unix_clock.hpp"
#include "actors/protocol/atoms.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/system/system_config.hpp"
#include "actors/server/cache_budget.hpp"
#include "actors/server/node_supervisor.hpp"
#include "actors/server/server_node.hpp"
#include "actors/server/throughput.hpp"
#include "actors/trust/node_identity.hpp"
#include "model/block.hpp"
#include "model/client_head.hpp"
#include "model/local_model.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "sim/cost_backend.hpp"
#include "actors/dht/signed_record.hpp"
#include "sim/forgery.hpp"
#include "sim/invariants.hpp"
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
// The end-of-run checks (cache-released, dht-readable) ask the servers this long before the run ends.
constexpr double kProbeBeforeEndS = 60;

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
    caf::actor connector, gate, supervisor;
    dht_node_actor dht;
    std::shared_ptr<const SigningKey> identity;
    bool started = false, serving = false, frozen = false, gone = false;
    bool restarted = false;       // gone, and back as a later entry with the same identity
    bool moving = false;          // from its balancer's decision to move (it announces "offline") until it serves again
    int64_t clock_offset_ms = 0;  // its wall clock's error (network.clock_skew_s)
    double changed_s = 0;         // its last start, placement, move, thaw or healed partition (dht-readable's clock)
  };
  std::deque<server> servers;
  // Hostile DHT peers (scenario hostile.impostors): a node, its DHT node and its own key, drawn from a stream of
  // their own so that worlds without them draw what they did before.
  struct impostor {
    std::string address;
    dht_node_actor dht;
    caf::actor connector;
    std::shared_ptr<const SigningKey> key;
    std::vector<std::shared_ptr<const SigningKey>> flood_keys;  // [hostile] flood_subkeys of them
    // The flood's signed records per DHT key, and when they expire (sent again as they are until shortly before).
    struct flood_records {
      caf::actor_clock::time_point expires{};
      std::vector<dht_item> items;
    };
    std::map<std::string, flood_records> flood;
  };
  std::vector<impostor> impostors;
  std::mt19937_64 impostor_rng;
  std::mt19937_64 skew_rng;         // the servers' clock errors: a stream of their own, like the impostors'
  std::mt19937_64 client_skew_rng;  // the clients' (their own, so that servers that join later draw the same)
  struct client {
    node_index node = 0;
    size_t swarm = 0;
    int64_t clock_offset_ms = 0;  // its wall clock's error (network.clock_skew_s), as a server's
    caf::actor connector;
    swarm_client_actor swarm_client;
  };
  std::vector<client> clients;
  std::vector<caf::actor> drivers;

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

  // Invariants (sim/invariants.hpp).
  invariant_bounds bounds;
  std::vector<CoverageWatch> coverage;  // per swarm
  std::vector<double> progress_s;       // per session: its last progress (arrival, open, failed open, token)
  std::vector<bool> stalled;            // per session: session-progress already reported
  std::vector<std::pair<double, bool>> covered_at;  // per sample: time, every block of every swarm served
  bool faults = false;                              // the world stages any fault (churn, loss, liars)
  // session-output (check_outputs): each session's prompt and tokens, and the whole model in one process per swarm
  // on a cost backend of its own, computing the same digests.
  std::vector<std::vector<int32_t>> prompts, token_ids;
  std::shared_ptr<CostBackend> reference_backend;
  std::vector<std::unique_ptr<LocalModel>> reference_models;
  std::vector<std::unique_ptr<LocalBlocks>> reference_blocks;  // training passes' reference

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
    client_backend = make_cost_backend({}, sc.check_outputs);
    for (int64_t k = 0; k < sc.model.swarms; ++k) {
      const std::string prefix = sc.model.swarms == 1 ? "sim" : "sim-" + std::to_string(k);
      sources.push_back(std::make_shared<SyntheticWeights>(sc.model.config(), sc.model.dtype, prefix));
      heads.push_back(std::make_shared<ClientHead>(*sources.back(), *client_backend));
    }
    plan_servers();
    plan_clients();
    plan_sessions();
    plan_churn();
    plan_impostors();
    bounds = bounds_for(sc);
    coverage.assign(sources.size(), CoverageWatch(bounds.cover_s));
    progress_s.assign(res.sessions.size(), -1);
    prompts.assign(res.sessions.size(), {});
    token_ids.assign(res.sessions.size(), {});
    stalled.assign(res.sessions.size(), false);
    faults = !sc.churn.events.empty() || sc.churn.crash_fraction > 0 || sc.churn.leave_fraction > 0 ||
             sc.churn.freeze_fraction > 0 || sc.network.loss > 0 ||
             std::any_of(sc.servers.begin(), sc.servers.end(), [](const auto& c) { return c.wrong_outputs > 0; });
    sched.clock().on_unanswered = [this](const request_crossing& c) { check_answered(c); };
    at(0, [this] { sample(); });
    if (sc.duration_s > kProbeBeforeEndS) at(sc.duration_s - kProbeBeforeEndS, [this] { probe_at_end(); });
  }

  // Kills each of these actors that exists, in this order (handles typed or not).
  template <class... Handles>
  static void kill(const Handles&... actors) {
    ((actors ? caf::anon_send_exit(actors, caf::exit_reason::kill) : void()), ...);
  }

  ~impl() {
    shutting_down = true;
    sched.clock().on_unanswered = nullptr;  // what the actors' ends time out now is no longer the world's to judge
    for (auto& s : servers) kill(s.supervisor, s.gate, s.dht, s.connector);
    for (auto& c : clients) kill(c.swarm_client, c.connector);
    for (auto& d : drivers) kill(d);
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
    s.backend = make_cost_backend({s.rec.tflops * 1e12, s.rec.bandwidth_gbs * 1e9, cls.op_overhead_us * 1e-6},
                                  sc.check_outputs);
    const double block = sc.model.block_bytes();
    const double memory = cls.memory_gb * 1e9;
    s.rec.num_blocks = cls.num_blocks > 0 ? cls.num_blocks : static_cast<int64_t>(0.85 * memory / block);
    s.rec.num_blocks = std::clamp<int64_t>(s.rec.num_blocks, 1, sc.model.blocks);
    const double kv_token = static_cast<double>(kv_bytes_per_token(sc.model.config()));
    const double left = memory - block * static_cast<double>(s.rec.num_blocks);
    s.cache_tokens =
        cls.cache_tokens > 0 ? cls.cache_tokens
        : memory > 0
            ? std::max<int64_t>(static_cast<int64_t>(left / (kv_token * static_cast<double>(s.rec.num_blocks))), 0)
            : 8192;
    measure_rates(s);
    if (sc.network.clock_skew_s > 0)
      s.clock_offset_ms =
          std::llround(std::uniform_real_distribution<double>(-1, 1)(skew_rng) * sc.network.clock_skew_s * 1000);
  }

  // The rates a server would measure at start (throughput.hpp), here in modelled time: one block of the model
  // on the server's cost backend, a single-token step at position 128 and a 1024-token forward.
  void measure_rates(server& s) {
    auto backend = make_cost_backend(s.backend->model());  // the time alone: no digests to compute
    auto block = load_block(*sources[0], 0, *backend);
    const int64_t d = sc.model.hidden_size;
    KVCache cache = block->make_cache(1, 129);
    Tensor one = backend->alloc(DType::f32, {1, 1, d});
    std::vector<int32_t> at{128};
    take_modelled_time(*backend);
    block->forward(one, at, &cache);
    const double t_inference = std::chrono::duration<double>(take_modelled_time(*backend)).count();
    Tensor batch = backend->alloc(DType::f32, {1, 1024, d});
    std::vector<int32_t> positions(1024);
    for (int32_t i = 0; i < 1024; ++i) positions[static_cast<size_t>(i)] = i;
    block->forward(batch, positions, nullptr);
    const double t_forward = std::chrono::duration<double>(take_modelled_time(*backend)).count();
    s.rec.inference_rps = 1.0 / t_inference;
    s.rec.forward_rps = 1024.0 / t_forward;
    const double link_mbps = s.cls->bandwidth_mbps > 0 ? s.cls->bandwidth_mbps : sc.network.bandwidth_mbps;
    const double network_rps = link_mbps * 1e6 / 8.0 / (4.0 * static_cast<double>(d));
    s.rec.throughput = announced_throughput(s.rec.forward_rps, network_rps, s.rec.num_blocks);
  }

  void plan_servers() {
    skew_rng.seed(seed ^ 0x5c3e77a1ull);
    for (const auto& cls : sc.servers)
      for (int64_t i = 0; i < cls.count; ++i) {
        const double spread =
            cls.count > 1 ? cls.start_spread_s * static_cast<double>(i) / static_cast<double>(cls.count) : 0;
        add_server(cls, cls.start_s + spread);
      }
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
    setup.inject_wrong_outputs = s.cls->wrong_outputs;
    setup.seed = seed * 7919 + i;
    setup.detached = false;
    return setup;
  }

  void start_server(size_t i) {
    server& s = servers[i];
    s.node = net.add_node(s.rec.address, s.rec.region, s.cls->bandwidth_mbps);
    s.connector = spawn_sim_connector(sys, net, s.node);
    // The server's key from the world's random stream (runs stay deterministic); its DHT id is derived from it.
    if (!s.identity) {  // a restarted server keeps its own
      KeySeed key_seed;
      for (auto& b : key_seed) b = static_cast<uint8_t>(rng());
      s.identity = std::make_shared<const SigningKey>(SigningKey::from_seed(key_seed));
    }
    dht_options d;
    d.id = dht_id_of(s.identity->public_key());
    d.address = s.rec.address;
    d.wall.offset_ms += s.clock_offset_ms;
    d.origin = origins_by_link();
    s.dht = spawn_dht_node(sys, d, s.connector);
    server_setup setup = setup_of(s, i);
    setup.dht = s.dht;
    setup.identity = s.identity;
    server_node node = start_server_node(sys, setup, s.connector, sources[s.swarm], false);
    s.gate = caf::actor_cast<caf::actor>(node.gate);
    s.started = true;
    s.changed_s = now_s();
    net.publish(s.rec.address, s.node, s.gate, s.dht);
    caf::send_as(s.gate, s.gate, address_atom::value, s.rec.address);  // from its own node, as a server does
    note("server-start", s.rec.address + " class=" + s.rec.server_class + " region=" + s.rec.region +
                             " blocks=" + std::to_string(s.rec.num_blocks) +
                             " inference_rps=" + fmt(s.rec.inference_rps) + " throughput=" + fmt(s.rec.throughput) +
                             (s.cls->wrong_outputs > 0 ? " wrong_outputs=" + fmt(s.cls->wrong_outputs) : ""));
    const std::vector<std::string> peers = initial_peers(i);
    if (peers.empty()) return start_parts(i, node, setup);
    dht_node_actor dht = s.dht;
    drivers.push_back(sys.spawn([this, i, node, setup, peers, dht](caf::event_based_actor* self) {
      self->request(dht, std::chrono::seconds(60), dht_bootstrap{peers})
          .then([=, this](const dht_bootstrap_reply&) { start_parts(i, node, setup); },
                [=, this](caf::error& e) {
                  note("server-bootstrap-failed", servers[i].rec.address + " " + describe(e));
                  start_parts(i, node, setup);
                });
    }));
  }

  // A starting node's initial peers (a config's `initial_peers`): the first three live servers in the order they
  // were planned, other than itself. While the first three live, every node gets them, as a swarm's fixed
  // bootstrap peers; a node starting after they went gets the next ones, as an operator takes peers from the
  // swarm's current list (otherwise a world where they left would only show that stale addresses fail).
  std::vector<std::string> initial_peers(size_t self) const {
    std::vector<std::string> out;
    for (size_t j = 0; j < servers.size() && out.size() < 3; ++j)
      if (j != self && servers[j].started && !servers[j].gone) out.push_back(servers[j].rec.address);
    return out;
  }

  void start_parts(size_t i, const server_node& node, const server_setup& setup) {
    server& s = servers[i];
    if (s.gone) return;
    announcer_options a;
    a.identity = s.identity;
    a.model_prefix = sources[s.swarm]->origin();
    a.period = timespan_of(sc.announce_period_s);
    a.wall.offset_ms += s.clock_offset_ms;
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
        s.changed_s = now_s();
        s.rec.first_block = e.first;
        s.rec.last_block = e.last;
        note("server-placed", s.rec.address + " blocks=" + span);
        break;
      case balancer_event::moved:
        ++s.rec.moves;
        s.changed_s = now_s();
        s.rec.first_block = e.first;
        s.rec.last_block = e.last;
        s.moving = false;
        note("server-moved", s.rec.address + " blocks=" + span);
        break;
      case balancer_event::failed:
        s.moving = false;
        s.changed_s = now_s();
        note("server-failed", s.rec.address + " " + e.error);
        break;
      case balancer_event::checked:
        s.moving = e.check.move;  // a move begins: its record goes "offline", then names the span it loads
        break;
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
    kill(s.supervisor, s.gate, s.dht);
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
      servers[i].changed_s = now_s();
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
      for (auto& s : servers)
        if (s.rec.region == region) s.changed_s = now_s();
      note("partition-healed", "region=" + region);
    });
  }

  // A random live server (for churn drawn at rates), or none.
  std::optional<size_t> pick_live() {
    auto live = live_servers();
    if (live.empty()) return std::nullopt;
    return live[std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng)];
  }

  // --- impostors ---------------------------------------------------------------------------------------------------

  void plan_impostors() {
    impostor_rng.seed(seed ^ 0x1b9057e5ull);
    for (int64_t i = 0; i < sc.hostile.impostors; ++i)
      at(sc.hostile.impostor_start_s, [this, i] { start_impostor(static_cast<size_t>(i)); });
  }

  // What a simulated DHT node counts a store against: the simulated node it came from (dht_options::origin).
  std::function<std::string(const caf::strong_actor_ptr&)> origins_by_link() {
    return [net = &net](const caf::strong_actor_ptr& sender) { return link_origin(*net, sender); };
  }

  void start_impostor(size_t i) {
    if (impostors.size() <= i) impostors.resize(i + 1);
    impostor& m = impostors[i];
    m.address = "impostor-" + std::to_string(i);
    KeySeed key_seed;
    for (auto& b : key_seed) b = static_cast<uint8_t>(impostor_rng());
    m.key = std::make_shared<const SigningKey>(SigningKey::from_seed(key_seed));
    const node_index node = net.add_node(m.address, sc.network.regions.front().name, 0);
    m.connector = spawn_sim_connector(sys, net, node);
    dht_options d;
    d.id = dht_id_of(m.key->public_key());
    d.address = m.address;
    d.origin = origins_by_link();
    m.dht = spawn_dht_node(sys, d, m.connector);
    // A flooder's keys: one per subkey it floods with, derived from its own (no draw from the world's streams).
    for (int64_t j = 0; j < sc.hostile.flood_subkeys; ++j) {
      KeySeed flood_seed = key_seed;
      for (size_t b = 0; b < 8; ++b) flood_seed[b] ^= static_cast<uint8_t>(static_cast<uint64_t>(j + 1) >> (8 * b));
      m.flood_keys.push_back(std::make_shared<const SigningKey>(SigningKey::from_seed(flood_seed)));
    }
    // It has no gate: peers reach its node. A forger's node answers through a proxy that adds forgeries.
    const dht_rpc_actor rpc = sc.hostile.forge ? spawn_forging_dht(sys, m.dht, m.key) : dht_rpc_actor(m.dht);
    net.publish(m.address, node, caf::actor_cast<caf::actor>(m.dht), rpc);
    note("impostor-start", m.address);
    const std::vector<std::string> peers = initial_peers(servers.size());
    dht_node_actor dht = m.dht;
    drivers.push_back(sys.spawn([peers, dht](caf::event_based_actor* self) {
      self->request(dht, std::chrono::seconds(60), dht_bootstrap{peers})
          .then([](const dht_bootstrap_reply&) {}, [](caf::error&) {});
    }));
    at(now_s() + sc.hostile.impostor_period_s, [this, i] { impersonate(i); });
  }

  // Reads a swarm the impostor picks, copies one of its servers' records (the address kept, the span widened to the
  // whole model or not, the throughput a hundred times), signs it with its own key and announces it; again every
  // period.
  void impersonate(size_t i) {
    at(now_s() + sc.hostile.impostor_period_s, [this, i] { impersonate(i); });
    const size_t swarm = static_cast<size_t>(impostor_rng() % sources.size());
    if (sc.hostile.forge) forge_at_holders(i, swarm);
    if (sc.hostile.flood_subkeys > 0) flood_holders(i, swarm);
    const std::string prefix = sources[swarm]->origin();
    dht_node_actor dht = impostors[i].dht;
    drivers.push_back(sys.spawn([this, i, prefix, dht](caf::event_based_actor* self) {
      read_swarm(self, dht, prefix, sc.model.blocks, std::chrono::seconds(30),
                 [=, this](std::vector<server_info> found) {
                   std::erase_if(found, [](const server_info& s) { return s.address.rfind("srv-", 0) != 0; });
                   if (!found.empty()) {
                     server_info info = found[impostor_rng() % found.size()];
                     const std::string victim = info.address;
                     if (impostor_rng() % 2) {  // else its own span: the server there opens the session, and only
                       info.first_block = 0;    // the key it proves tells it from the record's
                       info.last_block = sc.model.blocks;
                     }
                     info.throughput *= 100;
                     info.inference_rps *= 100;
                     info.forward_rps *= 100;
                     const auto expiration = self->clock().now() + timespan_of(sc.hostile.impostor_period_s * 2);
                     for (auto& put : announce_puts(*impostors[i].key, prefix, info, expiration))
                       self->request(dht, std::chrono::seconds(30), std::move(put))
                           .then([](const dht_put_reply&) {}, [](caf::error&) {});
                     note("impostor-announce", impostors[i].address + " as " + victim +
                                                   " blocks=" + std::to_string(info.first_block) + ".." +
                                                   std::to_string(info.last_block - 1));
                   }
                 });
    }));
  }

  // Reads each of the swarm's keys, forges its servers' records (sim/forgery.hpp) and sends the forgeries to the
  // nodes nearest the key, as a store request of its own; every node must refuse every one (forged-refused).
  void forge_at_holders(size_t i, size_t swarm) {
    const std::string prefix = sources[swarm]->origin();
    for (int64_t g = 0; g < group_count(sc.model.blocks); ++g) {
      const std::string key = group_key(prefix, g);
      drivers.push_back(sys.spawn([this, i, dht = impostors[i].dht, key](caf::event_based_actor* self) {
        self->request(dht, std::chrono::seconds(30), dht_get{key})
            .then(
                [=, this](const dht_get_reply& got) {
                  std::vector<dht_item> forged;
                  const auto now = self->clock().now();
                  for (const auto& [subkey, v] : got.entries) {
                    const dht_item genuine{
                        subkey, v.value,
                        std::chrono::duration_cast<std::chrono::nanoseconds>(v.expiration - now).count()};
                    for (auto& f : forge_server_records(*impostors[i].key, key_id(key), genuine, unix_ms_at(now)))
                      forged.push_back(std::move(f));
                  }
                  if (forged.empty()) return;
                  if (forged.size() > kMaxDhtItemsPerStore) forged.resize(kMaxDhtItemsPerStore);  // one request's worth
                  const std::string& address = impostors[i].address;
                  note("impostor-forge", address + " " + std::to_string(forged.size()) + " records of " + key);
                  store_at_holders(
                      i, key, std::move(forged),
                      [=, this](const Contact& c, const std::vector<dht_item>& sent, const dht_store_reply& r, bool) {
                        for (size_t k = 0; k < r.stored.size() && k < sent.size(); ++k)
                          if (r.stored[k])
                            violate("forged-refused", c.address,
                                    "stored a forgery of " + sent[k].subkey.substr(0, 12) + "... from " + address +
                                        " under " + key);
                      });
                },
                [](caf::error&) {});
      }));
    }
  }

  // Stores records under flood_subkeys fresh subkeys of its own (keys cost nothing) in each of the swarm's keys, at
  // the nodes nearest the key: records that check, of servers "offline" at addresses nobody serves. Each node keeps
  // at most its quota from this origin (actors/dht/storage.hpp); without one, the flood would fill the keys and the
  // servers that join or come back could not be stored (dht-readable).
  void flood_holders(size_t i, size_t swarm) {
    impostor& m = impostors[i];
    const std::string prefix = sources[swarm]->origin();
    const auto now = sys.clock().now();
    for (int64_t g = 0; g < group_count(sc.model.blocks); ++g) {
      const std::string key = group_key(prefix, g);
      auto& records = m.flood[key];
      if (records.expires - now < std::chrono::minutes(10)) {  // signed for 50 minutes, re-signed 10 before the end
        records.items.clear();
        records.expires = now + std::chrono::minutes(50);
        for (size_t j = 0; j < m.flood_keys.size(); ++j) {
          server_info info;
          info.model = prefix;
          info.address = "flood-" + std::to_string(i) + "-" + std::to_string(j);
          info.state = "offline";
          info.first_block = 0;
          info.last_block = 1;
          info.total_blocks = sc.model.blocks;
          const std::vector<char> payload = encode(info);
          const SigningKey& k = *m.flood_keys[j];
          const std::string subkey = owned_subkey(k.public_key());
          records.items.push_back({subkey,
                                   sign_record(k, key_id(key), subkey, std::string_view(payload.data(), payload.size()),
                                               unix_ms_at(records.expires)),
                                   0});
        }
      }
      std::vector<dht_item> items = records.items;
      for (auto& item : items)
        item.ttl_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(records.expires - now).count();
      auto held = std::make_shared<std::map<std::string, size_t>>();  // per node, over its requests
      const size_t sent = items.size();
      store_at_holders(i, key, std::move(items),
                       [=, this, address = m.address](const Contact& c, const std::vector<dht_item>&,
                                                      const dht_store_reply& r, bool last) {
                         size_t& n = (*held)[c.address];
                         n += static_cast<size_t>(std::count(r.stored.begin(), r.stored.end(), true));
                         if (last)
                           note("impostor-flood", address + " " + std::to_string(n) + " of " + std::to_string(sent) +
                                                      " held at " + c.address + " under " + key);
                       });
    }
  }

  // Sends `items` to the nodes nearest `key` (the impostor's own excepted) as store requests of its own, at most
  // kMaxDhtItemsPerStore each; `on_reply` sees each request's items and reply, and whether it was a node's last.
  using store_reply_fn =
      std::function<void(const Contact&, const std::vector<dht_item>&, const dht_store_reply&, bool last)>;
  void store_at_holders(size_t i, const std::string& key, std::vector<dht_item> items, store_reply_fn on_reply) {
    const impostor& m = impostors[i];
    const dht_contact sender{id_bytes(dht_id_of(m.key->public_key())), m.address};
    drivers.push_back(
        sys.spawn([dht = m.dht, connector = m.connector, address = m.address, key, sender, items = std::move(items),
                   on_reply = std::move(on_reply)](caf::event_based_actor* self) {
          self->request(dht, std::chrono::seconds(30), dht_find_nodes{key, {}})
              .then(
                  [=](const dht_find_nodes_reply& near) {
                    for (const Contact& c : near.closest) {
                      if (c.address == address) continue;
                      for (size_t from = 0; from < items.size(); from += kMaxDhtItemsPerStore) {
                        const size_t to = std::min(items.size(), from + kMaxDhtItemsPerStore);
                        const std::vector<dht_item> part(items.begin() + static_cast<std::ptrdiff_t>(from),
                                                         items.begin() + static_cast<std::ptrdiff_t>(to));
                        dht_call<dht_store_reply>(
                            self, connector, c.address, std::chrono::seconds(30),
                            dht_store_request{sender, id_bytes(key_id(key)), part, {}},
                            [=](const dht_store_reply& r) { on_reply(c, part, r, to == items.size()); },
                            [](const caf::error&) {});
                      }
                    }
                  },
                  [](caf::error&) {});
        }));
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
        if (e.server >= 0 && static_cast<size_t>(e.server) < servers.size())
          i = static_cast<size_t>(e.server);
        else if (e.kind != "partition" && e.kind != "join" && e.kind != "restart")
          i = pick_live();
        if (e.kind == "crash" && i)
          crash(*i);
        else if (e.kind == "leave" && i)
          leave(*i);
        else if (e.kind == "freeze" && i)
          freeze(*i, e.duration_s);
        else if (e.kind == "partition")
          partition(e.region, e.duration_s);
        else if (e.kind == "join")
          join(e.server_class);
        else if (e.kind == "slow" && i)
          slow(*i, e.duration_s, e.latency_ms);
        else if (e.kind == "restart")
          restart(i);
      });
    }
  }

  // A latency spike: every message to or from the server takes `latency_ms` longer for a while (a congested
  // uplink, a slow host); the links still deliver in order.
  void slow(size_t i, double duration, double latency_ms) {
    server& s = servers[i];
    if (!s.started || s.gone) return;
    net.set_extra_latency(s.node, latency_ms / 1000);
    note("server-slow", s.rec.address + " latency+=" + fmt(latency_ms) + "ms for=" + fmt(duration));
    at(now_s() + duration, [this, i] {
      net.set_extra_latency(servers[i].node, 0);
      servers[i].changed_s = now_s();
      note("server-slow-end", servers[i].rec.address);
    });
  }

  // A server that crashed or left starts again as its operator would restart it: the same identity (so the same
  // DHT id and owner key), address, class and span size. `which`: that server, or a random one that went.
  void restart(std::optional<size_t> which) {
    if (!which) {
      std::vector<size_t> gone;
      for (size_t j = 0; j < servers.size(); ++j)
        if (servers[j].gone && !servers[j].restarted) gone.push_back(j);
      if (!gone.empty()) which = gone[std::uniform_int_distribution<size_t>(0, gone.size() - 1)(rng)];
    }
    if (!which || !servers[*which].gone || servers[*which].restarted) {
      note("restart-skipped", "no server that went is left to restart");
      return;
    }
    server& old = servers[*which];
    old.restarted = true;
    server& s = servers.emplace_back();  // a deque: `old` stays valid
    s.cls = old.cls;
    s.swarm = old.swarm;
    s.identity = old.identity;
    s.clock_offset_ms = old.clock_offset_ms;  // the same machine
    s.cache_tokens = old.cache_tokens;
    s.backend = make_cost_backend(old.backend->model(), old.backend->digests());
    s.rec.address = old.rec.address;
    s.rec.swarm = old.rec.swarm;
    s.rec.server_class = old.rec.server_class;
    s.rec.region = old.rec.region;
    s.rec.tflops = old.rec.tflops;
    s.rec.bandwidth_gbs = old.rec.bandwidth_gbs;
    s.rec.num_blocks = old.rec.num_blocks;
    s.rec.inference_rps = old.rec.inference_rps;
    s.rec.forward_rps = old.rec.forward_rps;
    s.rec.throughput = old.rec.throughput;
    s.rec.start_s = now_s();
    note("server-restart", s.rec.address);
    start_server(servers.size() - 1);
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
    client_skew_rng.seed(seed ^ 0x3c11e47bull);
    for (int64_t i = 0; i < w.clients; ++i) {
      const std::string& region = w.regions[static_cast<size_t>(i) % w.regions.size()];
      const std::string name = "client-" + std::to_string(i);
      client c;
      c.node = net.add_node(name, region, 0);
      c.swarm = static_cast<size_t>(i) % sources.size();
      if (sc.network.clock_skew_s > 0)
        c.clock_offset_ms = std::llround(std::uniform_real_distribution<double>(-1, 1)(client_skew_rng) *
                                         sc.network.clock_skew_s * 1000);
      clients.push_back(c);
    }
  }

  void start_client(size_t i) {
    client& c = clients[i];
    if (c.swarm_client) return;
    const auto& w = sc.workload;
    c.connector = spawn_sim_connector(sys, net, c.node);
    swarm_client_options o;
    o.initial_peers = initial_peers(servers.size());
    o.model_prefix = sources[c.swarm]->origin();
    o.mode = w.mode == "push" ? route_mode::push : route_mode::relay;
    o.request_timeout = timespan_of(w.request_timeout_s);
    o.recovery_timeout = timespan_of(w.recovery_timeout_s);
    o.spot_checks.every = w.spot_check_every;
    o.spot_checks.new_servers = w.spot_check_every > 0;
    for (auto& b : o.dht_id) b = static_cast<uint8_t>(rng());
    o.wall.offset_ms += c.clock_offset_ms;
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
    for (int64_t j = 0; j < w.training_sessions; ++j) {
      if (w.arrival_rate_per_s > 0) t += std::exponential_distribution<double>(w.arrival_rate_per_s)(rng);
      session_record r;
      r.id = res.sessions.size();
      r.client = r.id % static_cast<size_t>(w.clients);
      r.training = true;
      r.arrival_s = t;
      r.prompt_tokens = w.training_batch * w.training_tokens;
      r.new_tokens = w.training_steps;
      res.sessions.push_back(r);
      at(t, [this, k = r.id] { start_training(k); });
    }
  }

  void start_session(size_t k) {
    session_record& r = res.sessions[k];
    progress_s[k] = now_s();
    start_client(r.client);
    note("session-arrive", "session=" + std::to_string(k) + " client=" + std::to_string(r.client) +
                               " prompt=" + std::to_string(r.prompt_tokens) + " new=" + std::to_string(r.new_tokens));
    std::vector<int32_t> prompt(static_cast<size_t>(r.prompt_tokens));
    for (auto& id : prompt) id = static_cast<int32_t>(1 + rng() % static_cast<uint64_t>(sc.model.vocab_size - 2));
    prompts[k] = prompt;
    drivers.push_back(sys.spawn([this, k, prompt](caf::event_based_actor* self) -> caf::behavior {
      open_session_for(self, k, prompt);
      return {
          [=, this](token_atom, int32_t id) {
            token_ids[k].push_back(id);
            auto& r = res.sessions[k];
            const double t = now_s();
            if (r.first_token_s < 0) r.first_token_s = t;
            r.token_s.push_back(t);
            progress_s[k] = t;
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
    swarm_client_actor swarm = clients[r.client].swarm_client;
    self->request(swarm, timespan_of(w.request_timeout_s * 20), open_session_request{w.max_length})
        .then(
            [=, this](inference_session_actor session) {
              opened(k);
              generate(self, k, session, prompt);
            },
            [=, this](caf::error& e) {
              if (open_failed(self, k, e)) end_session(self, k, {}, describe(e));
            });
  }

  // A session (inference or training) opened: progress.
  void opened(size_t k) {
    res.sessions[k].opened_s = now_s();
    progress_s[k] = now_s();
    note("session-open", "session=" + std::to_string(k));
  }

  // A session's open failed: it tries again in kOpenRetryS, or, after kOpenAttempts, gives up (true: end it).
  bool open_failed(caf::event_based_actor* self, size_t k, const caf::error& e) {
    auto& r = res.sessions[k];
    progress_s[k] = now_s();
    note("session-open-failed",
         "session=" + std::to_string(k) + " attempt=" + std::to_string(r.open_attempts) + " " + describe(e));
    if (r.open_attempts >= kOpenAttempts) return true;
    self->delayed_send(self, timespan_of(kOpenRetryS), retry_open_atom::value);
    return false;
  }

  void generate(caf::event_based_actor* self, size_t k, inference_session_actor session, std::vector<int32_t> prompt) {
    GenerationParams params;
    params.max_new_tokens = res.sessions[k].new_tokens;
    params.stop_at_eos = false;
    self->request(session, timespan_of(sc.duration_s * 4),
                  generate_request{prompt, params, caf::actor_cast<caf::actor>(self)})
        .then([=, this](const generate_result&) { end_session(self, k, session, {}); },
              [=, this](caf::error& e) { end_session(self, k, session, describe(e)); });
  }

  // --- training sessions -------------------------------------------------------------------------------------------

  void start_training(size_t k) {
    const session_record& r = res.sessions[k];
    const auto& w = sc.workload;
    progress_s[k] = now_s();
    start_client(r.client);
    note("session-arrive", "session=" + std::to_string(k) + " client=" + std::to_string(r.client) + " training batch=" +
                               std::to_string(w.training_batch) + " tokens=" + std::to_string(w.training_tokens) +
                               " steps=" + std::to_string(r.new_tokens));
    drivers.push_back(sys.spawn([this, k](caf::event_based_actor* self) -> caf::behavior {
      open_training_for(self, k);
      return {[=, this](retry_open_atom) { open_training_for(self, k); }};
    }));
  }

  void open_training_for(caf::event_based_actor* self, size_t k) {
    auto& r = res.sessions[k];
    ++r.open_attempts;
    const auto& w = sc.workload;
    self->request(clients[r.client].swarm_client, timespan_of(w.request_timeout_s * 20),
                  open_training_request{{}, w.training_max_batch_tokens})
        .then(
            [=, this](training_session_actor session) {
              opened(k);
              train(self, k, session, 0);
            },
            [=, this](caf::error& e) {
              if (open_failed(self, k, e)) end_training(self, k, {}, describe(e));
            });
  }

  // [batch, tokens, hidden] f32 host values in [-1, 1) from the world's stream.
  Tensor random_activations() {
    const auto& w = sc.workload;
    Tensor t = Tensor::empty(DType::f32, Shape{w.training_batch, w.training_tokens, sc.model.hidden_size});
    float* p = static_cast<float*>(t.data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng() >> 40) * 0x1.0p-23f - 1.0f;
    return t;
  }

  // Step `step` of training session k: a forward pass through the swarm, then its backward.
  void train(caf::event_based_actor* self, size_t k, training_session_actor session, int64_t step) {
    if (step == res.sessions[k].new_tokens) return end_training(self, k, session, {});
    const auto& w = sc.workload;
    Tensor hidden = random_activations();
    std::vector<int32_t> positions;
    for (int64_t b = 0; b < w.training_batch; ++b)
      for (int64_t s = 0; s < w.training_tokens; ++s) positions.push_back(static_cast<int32_t>(s));
    const auto timeout = timespan_of(sc.duration_s * 4);
    self->request(session, timeout, blocks_forward{hidden, positions, {}})
        .then(
            [=, this](blocks_forward_result& fwd) {
              progress_s[k] = now_s();
              res.sessions[k].unverified += fwd.unverified;
              if (sc.check_outputs && outputs_checkable(res.sessions[k]))
                check_training_output(k, step, hidden, positions, fwd.hidden);
              self->request(session, timeout, blocks_backward{fwd.pass, random_activations()})
                  .then(
                      [=, this](const blocks_backward_result& back) {
                        res.sessions[k].unverified += back.unverified;
                        if (back.grad_input.shape() != hidden.shape())
                          return end_training(self, k, session,
                                              "the backward of step " + std::to_string(step) + " gave " +
                                                  back.grad_input.describe() + " for " + hidden.describe());
                        const double t = now_s();
                        res.sessions[k].token_s.push_back(t);
                        progress_s[k] = t;
                        if (sc.log_steps)
                          note("train-step", "session=" + std::to_string(k) + " n=" + std::to_string(step + 1));
                        train(self, k, session, step + 1);
                      },
                      [=, this](caf::error& e) { end_training(self, k, session, describe(e)); });
            },
            [=, this](caf::error& e) { end_training(self, k, session, describe(e)); });
  }

  // session-output for a training pass: the swarm's forward equals the whole model's blocks run in one process.
  void check_training_output(size_t k, int64_t step, const Tensor& hidden, const std::vector<int32_t>& positions,
                             const Tensor& got) {
    const size_t swarm = clients[res.sessions[k].client].swarm;
    CostBackend& backend = reference();
    reference_blocks.resize(sources.size());
    if (!reference_blocks[swarm]) reference_blocks[swarm] = std::make_unique<LocalBlocks>(*sources[swarm], backend);
    const Tensor want = span_forward(reference_blocks[swarm]->blocks(), hidden, positions, Tensor(), backend);
    std::string differs;
    if (got.shape() != want.shape())
      differs = "is " + got.describe() + ", not " + want.describe();
    else {
      const int64_t row = want.dim(-1), rows = want.numel() / row;
      for (int64_t i = 0; i < rows && differs.empty(); ++i)
        if (std::memcmp(static_cast<const float*>(got.data()) + i * row,
                        static_cast<const float*>(want.data()) + i * row,
                        sizeof(float) * static_cast<size_t>(row)) != 0)
          differs = "differs in row " + std::to_string(i) + " of " + std::to_string(rows);
    }
    if (!differs.empty())
      violate("session-output", who(res.sessions[k]),
              "the forward of training step " + std::to_string(step) + " " + differs + " from the fault-free one");
  }

  void end_training(caf::event_based_actor* self, size_t k, training_session_actor session, std::string error) {
    auto& r = res.sessions[k];
    r.done_s = now_s();
    r.ok = error.empty();
    r.error = error;
    r.steps = static_cast<int64_t>(r.token_s.size());
    note(r.ok ? "session-done" : "session-failed", "session=" + std::to_string(k) +
                                                       " training steps=" + std::to_string(r.token_s.size()) +
                                                       (r.ok ? "" : " error=" + error));
    check_outcome(k);
    if (session) self->send_exit(session, caf::exit_reason::user_shutdown);
    self->quit();
  }

  void end_session(caf::event_based_actor* self, size_t k, inference_session_actor session, std::string error) {
    auto finish = [=, this](session_stats stats) {
      auto& r = res.sessions[k];
      r.done_s = now_s();
      r.ok = error.empty();
      r.error = error;
      r.steps = stats.steps;
      r.recovery_s = stats.recovery_seconds;
      r.failures = stats.failures;
      r.unverified = stats.unverified;
      note(r.ok ? "session-done" : "session-failed",
           "session=" + std::to_string(k) + " tokens=" + std::to_string(r.token_s.size()) +
               " failovers=" + std::to_string(r.recovery_s.size()) +
               (r.unverified > 0 ? " unverified=" + std::to_string(r.unverified) : "") +
               (r.ok ? "" : " error=" + error));
      check_outcome(k);
      if (session) self->send(session, close_atom::value);
      self->quit();
    };
    if (!session) return finish({});
    self->request(session, std::chrono::seconds(60), stats_atom::value)
        .then([=](const session_stats& s) { finish(s); }, [=](caf::error&) { finish({}); });
  }

  // --- invariants (sim/invariants.hpp) -----------------------------------------------------------------------------

  void violate(const std::string& invariant, const std::string& actors, const std::string& what) {
    res.violations.push_back({invariant, now_s(), actors, what});
    note("invariant-violated", invariant + " " + actors + ": " + what);
  }

  static std::string who(const session_record& r) {
    return "session=" + std::to_string(r.id) + " client=" + std::to_string(r.client);
  }

  // A request that crossed the network went unanswered until its timeout: a violation when its receiver ended
  // without answering while nothing else could explain the silence (its node up, no fault anywhere since the
  // request was sent, no message lost by the network).
  void check_answered(const request_crossing& c) {
    if (!has_ended(c.receiver) || net.crashed(c.to) || net.faults() != c.faults || net.loses_messages()) return;
    violate("request-answered", std::string(c.receiver_name) + " on " + net.name(c.to),
            "a request from " + net.name(c.from) + " at " + fmt(log.seconds(c.sent)) +
                " s reached it; it ended without answering, and the requester waited until its timeout");
  }

  void check_progress() {
    const double t = now_s();
    for (size_t k = 0; k < res.sessions.size(); ++k) {
      const auto& r = res.sessions[k];
      if (progress_s[k] < 0 || r.done_s >= 0 || stalled[k] || t - progress_s[k] <= bounds.stall_s) continue;
      stalled[k] = true;
      violate("session-progress", who(r),
              "no progress for " + fmt(t - progress_s[k]) + " s (bound " + fmt(bounds.stall_s) + " s) with " +
                  std::to_string(r.token_s.size()) + " of " + std::to_string(r.new_tokens) + " tokens" +
                  (r.opened_s < 0 ? ", not open" : ""));
    }
  }

  // Whether every sample from `from` (less one period: the state the session found) to `to` saw every block
  // served.
  bool covered_throughout(double from, double to) const {
    bool any = false;
    for (const auto& [t, covered] : covered_at) {
      if (t < from - sample_period() || t > to) continue;
      if (!covered) return false;
      any = true;
    }
    return any;
  }

  void check_outcome(size_t k) {
    const auto& r = res.sessions[k];
    const auto got = static_cast<int64_t>(r.token_s.size());
    if (r.ok && got != r.new_tokens)
      violate("session-outcome", who(r),
              "completed with " + std::to_string(got) + " tokens of the " + std::to_string(r.new_tokens) + " asked");
    if (!r.ok && r.error.empty()) violate("session-outcome", who(r), "failed without saying why");
    if (!r.training && r.ok && sc.check_outputs && outputs_checkable(r)) check_output(k);
    // Running out of cache is the swarm's capacity, not a fault: such a session may fail in any world.
    if (!r.ok && !faults && r.error.rfind("out_of_cache", 0) != 0 && covered_throughout(r.arrival_s, r.done_s))
      violate("session-outcome", who(r), "failed in a world without faults while every block was served: " + r.error);
  }

  // Whether session-output applies to a session: always in an honest world; where servers lie (in inference steps
  // only), when the clients' checks catch every lie they can recompute (the liars lie on every step, each new
  // server's first step is checked; or every step is checked) and every check of this session so far found a server
  // to recompute on.
  bool outputs_checkable(const session_record& r) const {
    const int64_t every = sc.workload.spot_check_every;
    for (const auto& c : sc.servers)
      if (c.wrong_outputs > 0 && (every == 0 || (c.wrong_outputs < 1 && every != 1))) return false;
    return r.unverified == 0;
  }

  // The backend the references run on (digests, no device model): the world's own, apart from the servers'.
  CostBackend& reference() {
    if (!reference_backend) reference_backend = make_cost_backend({}, true);
    return *reference_backend;
  }

  // session-output: the tokens the whole model generates from the session's prompt in one process, fault-free.
  std::vector<int32_t> reference_tokens(size_t k) {
    const size_t swarm = clients[res.sessions[k].client].swarm;
    reference_models.resize(sources.size());
    if (!reference_models[swarm]) reference_models[swarm] = std::make_unique<LocalModel>(sources[swarm], reference());
    GenerationParams params;
    params.max_new_tokens = res.sessions[k].new_tokens;
    params.stop_at_eos = false;
    return corolla::generate(*reference_models[swarm], prompts[k], params);
  }

  void check_output(size_t k) {
    const auto want = reference_tokens(k);
    const auto& got = token_ids[k];
    if (got == want) return;
    size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    const auto& r = res.sessions[k];
    violate("session-output", who(r),
            "token " + std::to_string(at) + " of " + std::to_string(want.size()) +
                " differs from the fault-free "
                "output (" +
                (at < got.size() ? std::to_string(got[at]) : std::string("none")) + " instead of " +
                (at < want.size() ? std::to_string(want[at]) : std::string("none")) + "), after " +
                std::to_string(r.recovery_s.size()) + " failovers");
  }

  // The checks that ask the servers, near the run's end: cache-released once every session has ended, and
  // dht-readable from a few live servers' DHT nodes.
  void probe_at_end() {
    const double t = now_s();
    bool quiet = true;
    for (size_t k = 0; k < res.sessions.size(); ++k) {
      const auto& r = res.sessions[k];
      if (r.arrival_s <= sc.duration_s && (progress_s[k] < 0 || r.done_s < 0)) quiet = false;
    }
    const double last_end = last_session_end();
    std::vector<size_t> released, readers;
    std::vector<int> readers_of_swarm(sources.size(), 0);
    for (size_t i = 0; i < servers.size(); ++i) {
      const server& s = servers[i];
      if (!s.started || s.gone || s.frozen || !s.serving) continue;
      if (quiet && last_end <= t - bounds.settle_s) released.push_back(i);
      if (readers_of_swarm[s.swarm]++ < 2) readers.push_back(i);
    }
    if (released.empty() && readers.empty()) return;
    drivers.push_back(sys.spawn([this, released, readers, t](caf::event_based_actor* self) {
      const auto timeout = std::chrono::seconds(30);
      for (size_t i : released)
        self->request(servers[i].gate, timeout, info_request{})
            .then([=, this](const server_info& info) { check_released(i, info, t); },
                  [=, this](caf::error& e) {
                    violate("cache-released", servers[i].rec.address, "did not answer: " + describe(e));
                  });
      for (size_t i : readers)
        read_swarm(self, servers[i].dht, sources[servers[i].swarm]->origin(), sc.model.blocks, timeout,
                   [=, this](std::vector<server_info> found) { check_listed(i, found, t); });
    }));
  }

  void check_released(size_t i, const server_info& info, double asked_s) {
    const server& s = servers[i];
    if (s.gone || s.frozen) return;  // it went while the question travelled
    const auto span = static_cast<size_t>(std::max<int64_t>(0, info.last_block - info.first_block));
    const CacheBudget empty(s.cache_tokens, std::vector<int64_t>(span, 0), sc.model.config().max_position);
    if (info.sessions == 0 && info.cache_tokens_left == empty.tokens_left_per_block()) return;
    violate("cache-released", s.rec.address,
            "holds " + std::to_string(info.sessions) + " sessions and " + std::to_string(info.cache_tokens_left) +
                " cache tokens per block of " + std::to_string(empty.tokens_left_per_block()) + ", " +
                fmt(asked_s - std::max(0.0, last_session_end())) + " s after the last session ended");
  }

  double last_session_end() const {
    double last = 0;
    for (const auto& r : res.sessions) last = std::max(last, r.done_s);
    return last;
  }

  void check_listed(size_t reader, const std::vector<server_info>& found, double asked_s) {
    const server& from = servers[reader];
    if (from.gone || from.frozen) return;
    std::string listed;  // for the messages: the first few found
    for (size_t n = 0; n < found.size() && n < 8; ++n) listed += " " + found[n].address;
    if (found.size() > 8) listed += " and " + std::to_string(found.size() - 8) + " more";
    for (const server& s : servers) {
      if (s.swarm != from.swarm || !s.started || s.gone || s.frozen || !s.serving) continue;
      if (s.moving || s.changed_s > asked_s - bounds.dht_s) continue;
      // Its own record: an impostor's copy names the same address under another key.
      const std::string owner = to_hex(s.identity->public_key());
      auto it = std::find_if(found.begin(), found.end(), [&](const server_info& i) {
        return (i.address == s.rec.address || i.public_name == s.rec.address) && i.owner == owner;
      });
      if (it != found.end() && it->first_block == s.rec.first_block && it->last_block == s.rec.last_block) continue;
      const std::string actors = from.rec.address + " reading " + s.rec.address;
      const std::string span = std::to_string(s.rec.first_block) + ":" + std::to_string(s.rec.last_block);
      if (it == found.end())
        violate("dht-readable", actors,
                "not listed (listed:" + listed + "), serving " + span + " unchanged for " + fmt(asked_s - s.changed_s) +
                    " s (bound " + fmt(bounds.dht_s) + " s)");
      else
        violate("dht-readable", actors,
                "listed with blocks " + std::to_string(it->first_block) + ":" + std::to_string(it->last_block) +
                    ", serving " + span);
    }
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
    bool all_covered = true;
    for (size_t k = 0; k < sources.size(); ++k) {
      std::vector<int64_t> spans, holes;
      for (const auto& srv : servers)
        if (srv.swarm == k && srv.started && !srv.gone && !srv.frozen) spans.push_back(srv.rec.num_blocks);
      for (size_t b = 0; b < blocks; ++b)
        if (count[k][b] == 0) holes.push_back(static_cast<int64_t>(b));
      all_covered = all_covered && holes.empty();
      if (auto v = coverage[k].observe(s.t_s, spare_capacity(spans, sc.model.blocks), holes.empty())) {
        std::string list;
        for (int64_t b : holes) list += (list.empty() ? "" : ",") + std::to_string(b);
        violate("block-coverage", "swarm " + sources[k]->origin() + " blocks " + list, *v);
      }
    }
    covered_at.emplace_back(s.t_s, all_covered);
    check_progress();
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
    check_progress();
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
