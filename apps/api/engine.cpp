#include "apps/api/engine.hpp"

#include <caf/all.hpp>
#include <ctime>
#include <random>

#include "actors/client/client_api.hpp"
#include "actors/client/route_planner.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/dht/dht_node.hpp"
#include "actors/protocol/errors.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla::api {

ApiError swarm_error(const caf::error& e) {
  ApiError out{503, "swarm_error", describe(e), ""};
  if (is(e, errc::out_of_cache)) out.message = "out of capacity: " + out.message;
  if (is(e, errc::bad_request) || is(e, errc::max_length_exceeded)) out = bad_request(describe(e));
  if (is(e, errc::timeout) || e == caf::sec::request_timeout) out.status = 504;
  if (is(e, errc::internal)) out.status = 502;
  return out;
}

namespace {

std::array<uint8_t, 20> random_id() {
  std::random_device rd;
  std::array<uint8_t, 20> id{};
  for (auto& b : id) b = static_cast<uint8_t>(rd());
  return id;
}

using state_callback = std::function<void(const nlohmann::json&)>;
struct state_request {
  state_callback cb;
};
}  // namespace
}  // namespace corolla::api
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::api::state_request)
namespace corolla::api {
namespace {

struct state_reader_state {
  std::weak_ptr<Engine> engine;
  dht_node_actor dht;
  bool bootstrapped = false;
  nlohmann::json cached;
  caf::actor_clock::time_point read_at{};
  bool have = false;
  std::vector<state_callback> waiting;
  static inline const char* name = "api_state_reader";
};
using state_reader = caf::stateful_actor<state_reader_state>;

// Blocks with no online server, as "a-b" ranges.
nlohmann::json missing_ranges(const std::vector<int>& coverage) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t b = 0; b < coverage.size();) {
    if (coverage[b] > 0) {
      ++b;
      continue;
    }
    size_t e = b;
    while (e + 1 < coverage.size() && coverage[e + 1] == 0) ++e;
    out.push_back(b == e ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e));
    b = e + 1;
  }
  return out;
}

// A server as /api/v1/state shows it; `standing`: what this API's swarm client knows of it (its reputation, a ban
// and why), when it has used it.
nlohmann::json server_json(const server_info& s, const peer_standing* standing) {
  nlohmann::json pings = nlohmann::json::object();
  for (const auto& [addr, ms] : s.pings) pings[addr] = ms;
  nlohmann::json out = {{"address", s.address},
                        {"public_name", s.public_name},
                        {"version", s.version},
                        {"state", s.state},
                        {"first_block", s.first_block},
                        {"last_block", s.last_block},
                        {"throughput", s.throughput},
                        {"cache_tokens_left", s.cache_tokens_left},
                        {"sessions", s.sessions},
                        {"dtype", s.dtype},
                        {"device", s.device},
                        {"pings_ms", pings},
                        {"kv_dtype", s.kv_dtype.empty() ? "f32" : s.kv_dtype}};
  if (standing)
    out["client_view"] = {{"successes", standing->successes},
                          {"failures", standing->failures},
                          {"banned", standing->banned},
                          {"banned_until_ms", standing->banned_until_ms},
                          {"last_failure", standing->last_failure}};
  return out;
}

void deliver(state_reader* self, nlohmann::json state) {
  auto& st = self->state;
  st.cached = std::move(state);
  st.read_at = self->clock().now();
  st.have = true;
  auto waiting = std::move(st.waiting);
  st.waiting.clear();
  for (auto& cb : waiting) cb(st.cached);
}

void read_models(state_reader* self, std::string dht_error) {
  std::shared_ptr<Engine> engine = self->state.engine.lock();
  if (!engine) return;
  const auto& models = engine->models();
  struct acc {
    std::vector<std::map<std::string, announced_server>> servers;  // per model, the standing entry per server
    std::vector<std::map<std::string, peer_standing>> standings;   // per model, its swarm client's, by peer_id
    size_t pending = 0;
    std::string error;
  };
  auto a = std::make_shared<acc>();
  a->servers.resize(models.size());
  a->standings.resize(models.size());
  a->error = std::move(dht_error);
  for (const auto& m : models) a->pending += static_cast<size_t>(group_count(m->num_blocks)) + (m->client ? 1 : 0);
  auto all_done = [=] {
    nlohmann::json out;
    out["api"] = {{"version", COROLLA_VERSION},
                  {"uptime_s", engine->uptime_s()},
                  {"sessions", engine->active_sessions()},
                  {"max_sessions", engine->config().max_sessions}};
    if (!a->error.empty()) out["dht_error"] = a->error;
    out["models"] = nlohmann::json::array();
    for (size_t i = 0; i < models.size(); ++i) {
      const auto& m = *models[i];
      std::vector<int> coverage(static_cast<size_t>(m.num_blocks), 0);
      nlohmann::json servers = nlohmann::json::array();
      for (const auto& [addr, entry] : a->servers[i]) {
        const server_info& s = entry.info;
        auto standing = a->standings[i].find(peer_id(s));
        servers.push_back(server_json(s, standing == a->standings[i].end() ? nullptr : &standing->second));
        if (s.state != "online") continue;
        for (int64_t b = std::max<int64_t>(0, s.first_block); b < std::min(s.last_block, m.num_blocks); ++b)
          coverage[static_cast<size_t>(b)]++;
      }
      const auto missing = missing_ranges(coverage);
      out["models"].push_back({{"name", m.name},
                               {"swarm_id", m.swarm_id},
                               {"num_blocks", m.num_blocks},
                               {"servers", servers},
                               {"coverage", coverage},
                               {"missing_blocks", missing},
                               {"healthy", missing.empty()}});
    }
    deliver(self, std::move(out));
  };
  if (a->pending == 0) return all_done();
  auto one_done = [=] {
    if (--a->pending == 0) all_done();
  };
  for (size_t i = 0; i < models.size(); ++i)
    for (int64_t g = 0; g < group_count(models[i]->num_blocks); ++g)
      self->request(self->state.dht, std::chrono::seconds(30), dht_get{group_key(models[i]->swarm_id, g)})
          .then(
              [=, key = group_key(models[i]->swarm_id, g)](const dht_get_reply& r) {
                for (auto& s : parse_servers(key, r.entries, self->clock().now()))
                  keep_standing(a->servers[i], std::move(s));
                one_done();
              },
              [=](caf::error& e) {
                if (a->error.empty()) a->error = describe(e);
                one_done();
              });
  for (size_t i = 0; i < models.size(); ++i)
    if (models[i]->client)
      self->request(models[i]->client, std::chrono::seconds(10), reputation_atom::value)
          .then(
              [=](std::vector<peer_standing>& v) {
                for (auto& s : v) a->standings[i][s.peer] = std::move(s);
                one_done();
              },
              [=](caf::error&) { one_done(); });  // the state shows no client view then
}

caf::behavior state_reader_actor(state_reader* self, std::weak_ptr<Engine> weak_engine, dht_node_actor dht) {
  self->state.engine = weak_engine;
  self->state.dht = dht;
  return {
      [=](state_request& req) {
        auto& st = self->state;
        auto engine = st.engine.lock();
        if (!engine) return;
        auto cb = std::move(req.cb);
        const auto ttl =
            std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(engine->config().state_ttl_s));
        if (st.have && self->clock().now() - st.read_at <= ttl) return cb(st.cached);
        st.waiting.push_back(std::move(cb));
        if (st.waiting.size() > 1) return;  // a read is under way
        if (st.bootstrapped) return read_models(self, "");
        self->request(dht, std::chrono::seconds(60), dht_bootstrap{engine->config().initial_peers})
            .then(
                [=](const dht_bootstrap_reply&) {
                  self->state.bootstrapped = true;
                  read_models(self, "");
                },
                [=](caf::error& e) { read_models(self, "joining the DHT: " + describe(e)); });
      },
  };
}

}  // namespace

Engine::Engine(caf::actor_system& sys, ApiConfig config, caf::actor connector)
    : sys_(sys), config_(std::move(config)), connector_(std::move(connector)) {
  for (const auto& mc : config_.models) {
    auto m = std::make_shared<ApiModel>(
        ApiModel{"", "", "", Tokenizer(nullptr), ChatTemplate{}, nullptr, nullptr, swarm_client_actor{}, 0, 0, 0, {}});
    try {
      m->path = hub::locate_model(mc.path, hub::ModelNeeds::client_head());
      auto source = open_weights(m->path);
      m->tokenizer = Tokenizer::load(
          mc.tokenizer.empty() ? m->path : hub::locate_model(mc.tokenizer, hub::ModelNeeds::tokenizer_only()));
      m->chat = ChatTemplate::for_tokenizer(m->tokenizer);
      m->backend = std::shared_ptr<Backend>(make_cpu_backend(0));
      m->head = std::make_shared<const ClientHead>(*source, *m->backend);
      m->swarm_id = mc.swarm_id.empty() ? default_model_prefix(*source) : mc.swarm_id;
    } catch (const std::exception& e) {
      throw std::runtime_error("model '" + (mc.name.empty() ? mc.path : mc.name) + "': " + e.what());
    }
    m->name = !mc.name.empty() ? mc.name : mc.path == "demo" ? "demo" : m->swarm_id;
    m->context = std::min<int64_t>(config_.max_length, m->head->config().max_position);
    m->num_blocks = m->head->config().num_layers;
    m->created = static_cast<int64_t>(std::time(nullptr));
    m->end_ids = m->head->config().eos_token_ids;
    for (int32_t id : m->tokenizer.eos_ids()) m->end_ids.push_back(id);
    if (m->chat.end_of_turn_id() >= 0) m->end_ids.push_back(m->chat.end_of_turn_id());
    swarm_client_options opts;
    opts.initial_peers = config_.initial_peers;
    opts.mode = config_.mode == "relay" ? route_mode::relay : route_mode::push;
    opts.request_timeout =
        std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(config_.request_timeout_s));
    opts.model_prefix = m->swarm_id;
    opts.spot_checks.every = config_.spot_check_every;
    opts.spot_checks.new_servers = config_.spot_check_every > 0;
    opts.dht_id = random_id();
    m->client = spawn_swarm_client(sys_, opts, m->head, connector_);
    models_.push_back(std::move(m));
  }
  dht_options dopt;
  dopt.id = random_id();
  dopt.client_mode = true;
  dopt.rpc_timeout = std::chrono::seconds(5);
  dht_ = spawn_dht_node(sys_, dopt, connector_);
}

Engine::~Engine() {
  for (auto& m : models_) caf::anon_send_exit(m->client, caf::exit_reason::user_shutdown);
  if (state_reader_) caf::anon_send_exit(state_reader_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(dht_, caf::exit_reason::user_shutdown);
}

std::shared_ptr<ApiModel> Engine::find(const std::string& name, ApiError* error) const {
  if (name.empty()) return models_.front();
  for (const auto& m : models_)
    if (m->name == name) return m;
  std::string names;
  for (const auto& m : models_) names += (names.empty() ? "'" : ", '") + m->name + "'";
  if (error)
    *error = ApiError{404, "not_found_error", "unknown model '" + name + "'; this API serves " + names, "model"};
  return nullptr;
}

Engine::Slot Engine::acquire_slot(ApiError* error) {
  int64_t now = active_.load();
  do {
    if (now >= config_.max_sessions) {
      counters_.sessions_refused++;
      if (error)
        *error = ApiError{429, "rate_limit_error",
                          "too many concurrent sessions (" + std::to_string(config_.max_sessions) +
                              " open, the most this API allows); try again later",
                          ""};
      return nullptr;
    }
  } while (!active_.compare_exchange_weak(now, now + 1));
  return std::shared_ptr<void>(static_cast<void*>(this), [this](void*) { active_--; });
}

void Engine::count_request(const std::string& route, int status) {
  std::lock_guard lock(mutex_);
  requests_[{route, status}]++;
}

std::map<std::pair<std::string, int>, int64_t> Engine::request_counts() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

double Engine::uptime_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

void Engine::read_state(std::function<void(const nlohmann::json&)> done) {
  std::lock_guard lock(reader_mutex_);
  if (!state_reader_) state_reader_ = sys_.spawn(state_reader_actor, weak_from_this(), dht_);
  caf::anon_send(state_reader_, state_request{std::move(done)});
}

}  // namespace corolla::api
