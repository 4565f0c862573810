// The chat.petals.dev-compatible API (its README and websocket_api.py / http_api.py are the reference):
//
// WebSocket /api/v2/generate
//   -> {type: "open_inference_session", model, max_length}         <- {ok: true}
//   -> {type: "generate", inputs, max_new_tokens | max_length, do_sample, temperature, top_k, top_p,
//       repetition_penalty, stop_sequence, extra_stop_sequences}   <- {ok: true, outputs, stop, token_count} ...
//   Without stop_sequence one reply holds up to max_new_tokens tokens (stop: true). With it, generation goes on,
//   one reply per max_new_tokens tokens, until the text ends with stop_sequence or one of extra_stop_sequences
//   (then the session holds stop_sequence's token in place of the last one, so the next turn follows the
//   model's own end of turn). The session keeps the conversation between generate requests.
//   Errors: {ok: false, traceback: "..."} and the socket closes, as in Petals.
// POST /api/v1/generate (form fields, a query string or a JSON body): model, inputs, max_new_tokens | max_length,
//   and the sampling fields  <- {ok: true, outputs} (errors: a 4xx/5xx status with {ok: false, traceback}).
//
// Where Corolla differs: generation always ends at the model's end-of-sequence token (Petals' loop would go on
// past it unless stop_sequence is its text); BOS is added only to the session's first input, not to every turn.
#include <deque>
#include <limits>
#include <mutex>

#include "apps/api/api_common.hpp"
#include "apps/api/api_routes.hpp"
#include "apps/api/generation.hpp"
#include "apps/api/json_text.hpp"
#include "apps/api/petals_messages.hpp"

namespace corolla::api {
namespace {

using nlohmann::json;

// The job for checked generate fields (read_petals_generate): tokenized for the model, ready for a session.
std::shared_ptr<GenJob> petals_job(Engine& engine, const ApiModel& m, const PetalsGenerate& g, bool first_input,
                                   int64_t* new_tokens_asked) {
  auto job = std::make_shared<GenJob>();
  if (g.inputs) {
    try {
      job->input = m.tokenizer.encode(*g.inputs, {.add_special = first_input, .parse_special = true});
    } catch (const std::invalid_argument& e) {
      throw bad_request(std::string("inputs: ") + e.what(), "inputs");
    }
  }
  job->sampling = g.sampling;
  job->trim_stop = false;
  job->skip_special = false;
  job->flush_at_end = false;
  if (g.max_length) job->max_total_length = *g.max_length;
  const int64_t n = g.max_new_tokens ? *g.max_new_tokens : engine.config().max_new_tokens;
  *new_tokens_asked = n;
  if (g.stop_sequence) {
    // Streaming: a reply every n tokens until a stop sequence (or the end of sequence, or the session is full).
    job->chunk_tokens = n;
    job->max_new_tokens = std::numeric_limits<int64_t>::max();
    job->length_is_error = !g.max_length;
    job->stops.push_back({*g.stop_sequence, -1});
    if (!g.extra_stop_sequences.empty()) {
      const auto ids = m.tokenizer.encode(*g.stop_sequence, {.add_special = false, .parse_special = true});
      if (ids.size() != 1)
        throw bad_request("extra_stop_sequences require stop_sequence length to be exactly 1 token", "stop_sequence");
      for (const auto& s : g.extra_stop_sequences) job->stops.push_back({s, ids[0]});
    }
  } else {
    job->chunk_tokens = std::numeric_limits<int64_t>::max();
    job->max_new_tokens = n;
  }
  return job;
}

// One WebSocket connection: a state machine (waiting for open -> opening -> ready <-> generating), with requests
// that arrive while it is busy queued in order.
class PetalsSocket : public std::enable_shared_from_this<PetalsSocket> {
 public:
  PetalsSocket(Engine& engine, std::shared_ptr<WebSocketSession> ws) : engine_(engine), ws_(std::move(ws)) {}

  void start() {
    auto self = shared_from_this();
    ws_->on_message([self](std::string text) { self->received(std::move(text)); });
    ws_->on_close([self] { self->closed(); });
    ws_->start();
  }

 private:
  enum class phase { want_open, opening, ready, generating, done };
  static constexpr size_t kMaxQueued = 8;

  void received(std::string text) {
    std::lock_guard lock(mutex_);
    if (phase_ == phase::done) return;
    if (phase_ == phase::opening || phase_ == phase::generating) {
      // Petals clients send one request and wait for its answer: a few waiting are plenty, and more would
      // let one socket hold any amount of memory.
      if (queued_.size() >= kMaxQueued)
        return fail(ApiError{429, "rate_limit_error",
                             "more than " + std::to_string(kMaxQueued) +
                                 " requests are waiting on this socket; send the next after an answer",
                             ""});
      queued_.push_back(std::move(text));
      return;
    }
    handle(text);
  }

  // Runs with mutex_ held.
  void handle(const std::string& text) {
    try {
      const PetalsMessage m = read_petals_message(text, phase_ == phase::want_open, engine_.config().max_new_tokens);
      if (const auto* o = std::get_if<PetalsOpen>(&m))
        open(*o);
      else
        generate(std::get<PetalsGenerate>(m));
    } catch (const ApiError& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(ApiError{500, "internal_error", std::string("internal error: ") + e.what(), ""});
    }
  }

  void open(const PetalsOpen& req) {
    ApiError err;
    model_ = engine_.find(req.model, &err);
    if (!model_) throw err;
    const std::optional<int64_t> max_length = req.max_length;
    if (*max_length > model_->context)
      throw bad_request("'max_length' must be in 2.." + std::to_string(model_->context) + " for " + model_->name +
                            ", got " + std::to_string(*max_length),
                        "max_length");
    slot_ = engine_.acquire_slot(&err);
    if (!slot_) throw err;
    session_ = std::make_shared<GenerationSession>(engine_, model_);
    phase_ = phase::opening;
    auto self = shared_from_this();
    session_->open(*max_length, [self](const ApiError* e) {
      std::lock_guard lock(self->mutex_);
      if (self->phase_ == phase::done) return;
      if (e) return self->fail(*e);
      self->phase_ = phase::ready;
      self->ws_->send(json_text({{"ok", true}}));
      self->drain();
    });
  }

  void generate(const PetalsGenerate& req) {
    int64_t n = 0;
    auto job = petals_job(engine_, *model_, req, first_input_, &n);
    first_input_ = false;
    auto self = shared_from_this();
    job->on_chunk = [self](const std::string& text, int64_t tokens) {
      self->ws_->send(json_text({{"ok", true}, {"outputs", text}, {"stop", false}, {"token_count", tokens}}));
    };
    job->on_done = [self](const GenResult& r) {
      std::lock_guard lock(self->mutex_);
      if (self->phase_ == phase::done) return;
      self->ws_->send(
          json_text({{"ok", true}, {"outputs", r.last_text}, {"stop", true}, {"token_count", r.last_tokens}}));
      self->phase_ = phase::ready;
      self->job_ = nullptr;
      self->drain();
    };
    job->on_error = [self](const ApiError& e) {
      std::lock_guard lock(self->mutex_);
      self->fail(e);
    };
    job_ = job;
    phase_ = phase::generating;
    session_->run(job);
  }

  // Handles queued requests until one makes it busy again. Runs with mutex_ held.
  void drain() {
    while (!queued_.empty() && phase_ == phase::ready) {
      std::string next = std::move(queued_.front());
      queued_.pop_front();
      handle(next);
    }
  }

  // Runs with mutex_ held.
  void fail(const ApiError& e) {
    if (phase_ == phase::done) return;
    ws_->send(json_text({{"ok", false}, {"traceback", e.message}}));
    ws_->close();
    release();
  }

  void closed() {
    std::lock_guard lock(mutex_);
    release();
  }

  void release() {
    phase_ = phase::done;
    queued_.clear();
    if (job_) job_->cancelled->store(true);
    job_ = nullptr;
    if (session_) session_->close();
    session_ = nullptr;
    slot_ = nullptr;
  }

  Engine& engine_;
  std::shared_ptr<WebSocketSession> ws_;
  // Recursive: a GenerationSession whose actor is gone answers open() and run() at once, on this thread, and its
  // callbacks take the lock that handle() already holds (a plain mutex deadlocked the socket's I/O thread).
  std::recursive_mutex mutex_;
  phase phase_ = phase::want_open;
  std::deque<std::string> queued_;
  std::shared_ptr<ApiModel> model_;
  std::shared_ptr<GenerationSession> session_;
  std::shared_ptr<GenJob> job_;
  Engine::Slot slot_;
  bool first_input_ = true;
};

json request_fields(const Request& req) {
  const std::string target(req.target());
  json out = json::object();
  if (auto q = target.find('?'); q != std::string::npos)
    for (auto& [k, v] : parse_form(target.substr(q + 1))) out[k] = v;
  const std::string type(req[http::field::content_type]);
  if (type.find("application/json") != std::string::npos) {
    const json body = parse_json_body(req.body());
    for (auto& [k, v] : body.items()) out[k] = v;
  } else if (!req.body().empty()) {
    for (auto& [k, v] : parse_form(req.body())) out[k] = v;
  }
  return out;
}

void petals_error(const Responder& res, const ApiError& e) {
  res.json(e.status, {{"ok", false}, {"traceback", e.message}});
}

void http_generate(Engine& engine, const Request& req, const Responder& res) {
  try {
    const json fields = request_fields(req);
    ApiError err;
    auto model = engine.find(get_string(fields, "model").value_or(""), &err);
    if (!model) throw err;
    const PetalsGenerate g = read_petals_generate(fields, engine.config().max_new_tokens);
    if (!g.inputs) throw bad_request("'inputs' is required", "inputs");
    int64_t n = 0;
    auto job = petals_job(engine, *model, g, true, &n);
    if (!job->stops.empty()) throw bad_request("stop_sequence is for the WebSocket API (/api/v2/generate)");
    const int64_t prompt_len = static_cast<int64_t>(job->input.size());
    int64_t max_length = prompt_len + n;
    if (job->max_total_length > 0) max_length = std::min(max_length, job->max_total_length);
    if (max_length <= prompt_len)
      throw bad_request("max_length " + std::to_string(max_length) + " leaves no room after the " +
                            std::to_string(prompt_len) + " input tokens",
                        "max_length");
    if (max_length > model->context)
      throw bad_request("the inputs (" + std::to_string(prompt_len) + " tokens) and " + std::to_string(n) +
                            " new tokens exceed this model's maximum length of " + std::to_string(model->context),
                        "max_new_tokens");
    Engine::Slot slot = engine.acquire_slot(&err);
    if (!slot) throw err;
    auto session = std::make_shared<GenerationSession>(engine, model);
    auto slot_box = std::make_shared<Engine::Slot>(std::move(slot));
    auto finish = [session, slot_box] {
      session->close();
      slot_box->reset();
    };
    job->on_done = [=](const GenResult& r) {
      finish();
      res.json(200, {{"ok", true}, {"outputs", r.text}});
    };
    job->on_error = [=](const ApiError& e) {
      finish();
      petals_error(res, e);
    };
    session->open(max_length, [=](const ApiError* e) {
      if (e) {
        finish();
        return petals_error(res, *e);
      }
      session->run(job);
    });
  } catch (const ApiError& e) {
    petals_error(res, e);
  }
}

}  // namespace

void add_petals_routes(HttpServer& server, Engine& engine) {
  server.websocket("/api/v2/generate", [&engine](const Request&, std::shared_ptr<WebSocketSession> ws) {
    std::make_shared<PetalsSocket>(engine, std::move(ws))->start();
  });
  server.route(http::verb::post, "/api/v1/generate",
               [&engine](const Request& req, const Responder& res) { http_generate(engine, req, res); });
}

}  // namespace corolla::api
