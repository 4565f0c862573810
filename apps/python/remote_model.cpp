#include "apps/python/remote_model.hpp"

#include <random>
#include <stdexcept>

#include "actors/config/config_file.hpp"
#include "actors/dht/announcer.hpp"
#include "actors/protocol/errors.hpp"
#include "model/hub/fetch_model.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla::python {

template <class Reply, class Handle, class... Ts>
Reply RemoteModel::ask(const Handle& to, Ts&&... xs) {
  caf::scoped_actor self{*sys_};
  std::optional<Reply> reply;
  caf::error failure;
  self->request(to, caf::infinite, std::forward<Ts>(xs)...)
      .receive([&](Reply& r) { reply = std::move(r); }, [&](caf::error& e) { failure = std::move(e); });
  if (!reply) throw std::runtime_error(describe(failure));
  return std::move(*reply);
}

RemoteModel::RemoteModel(const std::string& name_or_path, const std::vector<std::string>& initial_peers,
                         const std::string& swarm_id, const std::string& mode, double request_timeout_s)
    : timeout_s_(request_timeout_s) {
  if (initial_peers.empty()) throw std::invalid_argument("initial_peers is empty: give HOST:PORT of a swarm's node");
  if (mode != "push" && mode != "relay")
    throw std::invalid_argument("mode must be 'push' or 'relay', not '" + mode + "'");
  if (!(request_timeout_s > 0)) throw std::invalid_argument("request_timeout must be positive");
  path_ = hub::locate_model(name_or_path, hub::ModelNeeds::client_head());
  auto source = open_weights(path_);
  backend_ = make_cpu_backend(1);  // the client computes only embeddings and logits
  head_ = std::make_shared<const ClientHead>(*source, *backend_);
  sys_ = std::make_unique<caf::actor_system>(cfg_);
  swarm_client_options opts;
  for (const std::string& p : initial_peers) {  // HOST:PORT, or a Petals multiaddress
    const std::string peer = host_port_of_multiaddr(p).value_or(p);
    if (auto problem = check_peer_address(peer)) throw std::invalid_argument("initial_peers: " + *problem);
    opts.initial_peers.push_back(peer);
  }
  opts.mode = mode == "push" ? route_mode::push : route_mode::relay;
  opts.model_prefix = swarm_id.empty() ? default_model_prefix(*source) : swarm_id;
  opts.request_timeout = std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(request_timeout_s));
  std::random_device rd;
  for (auto& byte : opts.dht_id) byte = static_cast<uint8_t>(rd());
  client_ = spawn_swarm_client(*sys_, opts, head_);
}

RemoteModel::~RemoteModel() {
  caf::anon_send_exit(client_, caf::exit_reason::user_shutdown);
  if (blocks_) caf::anon_send_exit(blocks_, caf::exit_reason::user_shutdown);
}

std::shared_ptr<RemoteSession> RemoteModel::open_session(int64_t max_length) {
  if (max_length < 1) throw std::invalid_argument("max_length must be at least 1");
  auto session = ask<inference_session_actor>(client_, open_session_request{max_length, 1});
  return std::make_shared<RemoteSession>(shared_from_this(), session, max_length);
}

std::vector<int32_t> RemoteModel::generate(const std::vector<int32_t>& ids, const GenerationParams& params) {
  auto session = open_session(static_cast<int64_t>(ids.size()) + params.max_new_tokens);
  return session->generate(ids, params);
}

std::vector<int32_t> RemoteSession::generate(const std::vector<int32_t>& ids, const GenerationParams& params) {
  if (!session_) throw std::runtime_error("the session is closed");
  if (const std::string problem = generation_problem(params); !problem.empty()) throw std::invalid_argument(problem);
  std::vector<int32_t> prompt;
  if (unfed_) prompt.push_back(*unfed_);
  prompt.insert(prompt.end(), ids.begin(), ids.end());
  if (prompt.empty()) throw std::invalid_argument("nothing to continue from: give input ids");
  auto result = model_->ask<generate_result>(session_, generate_request{prompt, params, caf::actor{}});
  // Every id but the last generated one has gone through the blocks.
  position_ += static_cast<int64_t>(prompt.size() + result.tokens.size()) - (result.tokens.empty() ? 0 : 1);
  unfed_ = result.tokens.empty() ? std::nullopt : std::optional<int32_t>(result.tokens.back());
  return result.tokens;
}

void RemoteSession::close() {
  if (!session_) return;
  caf::anon_send(session_, close_atom::value);
  session_ = inference_session_actor{};
}

Tensor RemoteModel::forward(const Tensor& hidden, const std::vector<int32_t>& positions, uint64_t& pass) {
  if (!blocks_) blocks_ = ask<training_session_actor>(client_, open_training_request{});
  auto r = ask<blocks_forward_result>(blocks_, blocks_forward{hidden, positions, Tensor{}});
  pass = r.pass;
  return r.hidden;
}

Tensor RemoteModel::backward(uint64_t pass, const Tensor& grad_output) {
  if (!blocks_) throw std::runtime_error("backward before any forward");
  return ask<blocks_backward_result>(blocks_, blocks_backward{pass, grad_output}).grad_input;
}

}  // namespace corolla::python
