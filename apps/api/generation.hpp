// One conversation with the swarm, for the HTTP side: an actor that holds an inference session (opened through
// the model's swarm client) and runs each job as one generation of the session (model/generation.hpp: sampling,
// end tokens and the length limit live there), its token callback turning tokens into text, matching stop
// sequences and noticing a client that went away. The session holds the conversation, so a later job continues it
// (the Petals WebSocket protocol); the last token drawn is fed at the start of the next job.
//
// Callbacks run on an actor thread: the HTTP side posts them to its own executor.
#pragma once

#include <atomic>
#include <caf/actor.hpp>
#include <functional>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "apps/api/engine.hpp"
#include "model/sampling.hpp"

namespace corolla::api {

struct StopSequence {
  std::string text;
  int32_t replace_with = -1;  // Petals' extra stop sequences: the token the session holds instead of the last one
};

struct GenResult {
  std::string text;           // what was shown (trimmed at a stop sequence when trimming)
  int64_t prompt_tokens = 0;  // tokens fed for this job (the whole prompt, or what the session did not hold)
  int64_t completion_tokens = 0;
  std::string finish_reason;  // "stop" (end of sequence or a stop sequence), "length", "cancelled"
  std::string last_text;      // the text after the last on_chunk call (the job's final chunk)
  int64_t last_tokens = 0;    // tokens drawn after the last on_chunk call
  double seconds = 0;         // from the job's start to its end
  double first_token_seconds = 0;
};

struct GenJob {
  std::vector<int32_t> input;  // ids to append to the conversation (may be empty to continue)
  SamplingParams sampling;
  int64_t max_new_tokens = 16;   // this job's limit
  bool length_is_error = false;  // running out of session (max_length) is an error, not finish "length"
  int64_t max_total_length = 0;  // > 0: also stop ("length") when the session holds this many tokens
  int64_t chunk_tokens = 1;      // call on_chunk every this many tokens (and at the end)
  std::vector<StopSequence> stops;
  bool trim_stop = true;     // true: text ends before a stop sequence; false: includes it
  bool skip_special = true;  // leave special tokens' text out
  bool flush_at_end = true;  // false: a character left incomplete waits for the session's next job
  bool stop_at_eos = true;
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);

  // text: new text (possibly empty); tokens: tokens drawn since the last call.
  std::function<void(const std::string& text, int64_t tokens)> on_chunk;
  std::function<void(const GenResult&)> on_done;
  std::function<void(const ApiError&)> on_error;
};

// A handle on the actor; closing it (or destroying the last handle) closes the inference session.
class GenerationSession {
 public:
  GenerationSession(Engine& engine, std::shared_ptr<ApiModel> model);
  ~GenerationSession();
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Opens an inference session of max_length tokens over the swarm.
  void open(int64_t max_length, std::function<void(const ApiError* error)> done);
  // Runs a job (one at a time: a job sent while one runs fails with a 409).
  void run(std::shared_ptr<GenJob> job);
  const std::shared_ptr<ApiModel>& model() const { return model_; }
  void close();

 private:
  std::shared_ptr<ApiModel> model_;
  std::mutex mutex_;
  caf::actor actor_;
};

}  // namespace corolla::api
