// What the Python package drives: a model whose blocks run on a swarm, seen through the same client actors as the
// `corolla` command's (an actor system in this process, a swarm client, sessions), with blocking calls that
// Python can make. Errors come back as std::runtime_error with the client's description of them.
#pragma once

#include <caf/all.hpp>
#include <memory>
#include <string>
#include <vector>

#include "actors/client/client_api.hpp"
#include "actors/system/system_config.hpp"
#include "model/local_model.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::python {

class RemoteModel;

// An inference session: a conversation whose KV caches stay on the servers between calls, up to max_length tokens.
class RemoteSession {
 public:
  RemoteSession(std::shared_ptr<RemoteModel> model, inference_session_actor session, int64_t max_length)
      : model_(std::move(model)), session_(std::move(session)), max_length_(max_length) {}
  ~RemoteSession() { close(); }
  // Generates after `ids` (the new input, which may be empty to continue); returns the new ids. As in Petals, the
  // last id generated before is fed first: the servers have not seen it yet.
  std::vector<int32_t> generate(const std::vector<int32_t>& ids, const GenerationParams& params);
  void close();
  bool closed() const { return !session_; }
  int64_t max_length() const { return max_length_; }
  // Tokens the servers hold for the session.
  int64_t position() const { return position_; }

 private:
  std::shared_ptr<RemoteModel> model_;
  inference_session_actor session_;
  int64_t max_length_;
  int64_t position_ = 0;
  std::optional<int32_t> unfed_;  // the last id generated, not yet sent through the blocks
};

class RemoteModel : public std::enable_shared_from_this<RemoteModel> {
 public:
  // `name_or_path`: a local model folder or .gguf file, or a Hub name (only the head is fetched);
  // `initial_peers`: HOST:PORT of any server or DHT node of the swarm; `swarm_id`: its DHT prefix ("" derives it
  // from the model as servers do); `mode`: "push" or "relay".
  RemoteModel(const std::string& name_or_path, const std::vector<std::string>& initial_peers,
              const std::string& swarm_id, const std::string& mode, double request_timeout_s);
  ~RemoteModel();

  const ModelConfig& config() const { return head_->config(); }
  const std::string& path() const { return path_; }
  const ClientHead& head() const { return *head_; }

  std::shared_ptr<RemoteSession> open_session(int64_t max_length);
  // Generates after `ids` in a session of its own.
  std::vector<int32_t> generate(const std::vector<int32_t>& ids, const GenerationParams& params);

  // The swarm's blocks as one function and its gradient (what prompt tuning trains through): forward returns the
  // last block's output [B, S, D] for `hidden` [B, S, D] at `positions` and names the pass; backward returns the
  // gradient of `hidden` for the gradient of that output. A pass is kept until its backward.
  Tensor forward(const Tensor& hidden, const std::vector<int32_t>& positions, uint64_t& pass);
  Tensor backward(uint64_t pass, const Tensor& grad_output);

 private:
  friend class RemoteSession;
  template <class Reply, class Handle, class... Ts>
  Reply ask(const Handle& to, Ts&&... xs);

  std::string path_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const ClientHead> head_;
  corolla_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  swarm_client_actor client_;
  training_session_actor blocks_;  // the training session, opened at the first forward
  double timeout_s_;
};

}  // namespace corolla::python
