// The API's view of the swarm: the models it offers (tokenizer, chat template, client head and a swarm client
// each), the limit on open inference sessions, counters for /metrics, and the swarm's state read from the DHT
// for /health. Shared by every HTTP connection; thread-safe.
#pragma once

#include <atomic>
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actors/client/client_api.hpp"
#include "actors/dht/dht_api.hpp"
#include "apps/api/api_config.hpp"
#include "apps/api/api_error.hpp"
#include "kernels/backend.hpp"
#include "model/client_head.hpp"
#include "model/tokenizer/chat_template.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::api {

// A swarm error (caf::error in Corolla's category) as the status a client should see: no_route and out_of_cache
// are 503 (try later), timeouts 504, bad requests 400.
ApiError swarm_error(const caf::error& e);

struct ApiModel {
  std::string name;
  std::string path;
  std::string swarm_id;
  Tokenizer tokenizer;
  ChatTemplate chat;
  std::shared_ptr<Backend> backend;  // the head's
  std::shared_ptr<const ClientHead> head;
  swarm_client_actor client;
  int64_t context = 0;  // longest session: the model's positions, capped by the API's max_length
  int64_t num_blocks = 0;
  int64_t created = 0;  // unix time the API loaded it (OpenAI's "created")
  // The tokens that end a generation: EOS as config.json, the tokenizer (and generation_config.json) list it, and
  // the chat format's end of turn.
  std::vector<int32_t> end_ids;
};

struct Counters {
  std::atomic<int64_t> prompt_tokens{0}, generated_tokens{0}, generations{0}, generation_errors{0};
  std::atomic<int64_t> sessions_opened{0}, sessions_refused{0};
};

// Always held by a shared_ptr (make_shared): the actors of sessions keep it alive while they run.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Loads every model's tokenizer and head and spawns a swarm client for each (through `connector`). Throws
  // std::runtime_error naming the model that fails to load.
  Engine(caf::actor_system& sys, ApiConfig config, caf::actor connector);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  caf::actor_system& system() { return sys_; }
  const ApiConfig& config() const { return config_; }
  const std::vector<std::shared_ptr<ApiModel>>& models() const { return models_; }
  // The model named `name` (an empty name: the first one); else a 404 error listing the names.
  std::shared_ptr<ApiModel> find(const std::string& name, ApiError* error) const;

  // A slot for one inference session, released when the last copy of the handle goes. nullopt (and a 429 in
  // `error`) when max_sessions are open.
  using Slot = std::shared_ptr<void>;
  Slot acquire_slot(ApiError* error);
  int64_t active_sessions() const { return active_; }

  Counters& counters() { return counters_; }
  // HTTP requests by route and status, for /metrics.
  void count_request(const std::string& route, int status);
  std::map<std::pair<std::string, int>, int64_t> request_counts() const;
  double uptime_s() const;

  // The swarm's state as /api/v1/state serves it (servers of each model from the DHT, block coverage), read at
  // most every state_ttl_s; `done` runs on an actor thread.
  void read_state(std::function<void(const nlohmann::json&)> done);

 private:
  caf::actor_system& sys_;
  ApiConfig config_;
  caf::actor connector_;
  dht_node_actor dht_;  // client-mode DHT node for reading server announcements
  std::mutex reader_mutex_;
  caf::actor state_reader_;  // spawned on first use
  std::vector<std::shared_ptr<ApiModel>> models_;
  std::atomic<int64_t> active_{0};
  Counters counters_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace corolla::api
