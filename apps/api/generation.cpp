#include "apps/api/generation.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/client/client_api.hpp"
#include "actors/protocol/errors.hpp"
#include "apps/api/text_stream.hpp"

namespace corolla::api {
namespace {

struct open_cmd {
  int64_t max_length = 0;
  std::function<void(const ApiError*)> done;
};
struct run_cmd {
  std::shared_ptr<GenJob> job;
};

}  // namespace
}  // namespace corolla::api

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::api::open_cmd)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(corolla::api::run_cmd)

namespace corolla::api {
namespace {

// One job in progress.
struct running {
  std::shared_ptr<GenJob> job;
  std::unique_ptr<TextStream> text;
  GenResult result;
  std::vector<int32_t> next_input;  // what the next step feeds
  int64_t steps = 0;
  int64_t since_chunk = 0;
  std::string chunk;
  caf::actor_clock::time_point start;
};

struct gen_state {
  std::shared_ptr<Engine> engine;  // kept alive while the session runs
  std::shared_ptr<ApiModel> model;
  caf::actor session;  // the inference session (none until opened, or after it failed)
  std::string lost;    // why the session is gone, when it is
  int64_t max_length = 0;
  int64_t fed = 0;                         // positions the session holds
  std::optional<int32_t> drawn;            // the last token drawn, not yet fed
  std::unique_ptr<StreamDecoder> decoder;  // the session's text, across jobs
  bool decoder_skips = true;
  bool busy = false;
  static inline const char* name = "api_generation";
};

using gen_actor = caf::stateful_actor<gen_state>;

double seconds_since(gen_actor* self, caf::actor_clock::time_point t) {
  return std::chrono::duration<double>(self->clock().now() - t).count();
}

void fail(gen_actor* self, const std::shared_ptr<running>& r, const ApiError& e) {
  self->state.busy = false;
  self->state.engine->counters().generation_errors++;
  if (r->job->on_error) r->job->on_error(e);
}

void finish(gen_actor* self, const std::shared_ptr<running>& r, const std::string& reason) {
  auto& st = self->state;
  st.busy = false;
  r->chunk += r->text->finish(r->job->flush_at_end);
  r->result.last_text = std::move(r->chunk);
  r->result.last_tokens = r->since_chunk;
  r->result.text = r->text->shown();
  r->result.finish_reason = reason;
  r->result.seconds = seconds_since(self, r->start);
  auto& c = st.engine->counters();
  c.generations++;
  c.prompt_tokens += r->result.prompt_tokens;
  c.generated_tokens += r->result.completion_tokens;
  if (r->job->on_done) r->job->on_done(r->result);
}

// Whether the text shows the end token that ends a generation: only where special tokens are shown and the
// client's stop sequences name it. chat.petals.dev's page stops at its own sequence ("###") and would otherwise
// show the model's "<|im_end|>" at the end of every reply; a client that asks to stop at "<|im_end|>" sees it,
// as Petals' decode keeps it.
bool shows_end_token(const GenJob& job, const Tokenizer& tokenizer, int32_t id) {
  if (job.skip_special) return false;
  const std::string text = tokenizer.token_bytes(id);
  return !text.empty() && std::any_of(job.stops.begin(), job.stops.end(),
                                      [&](const StopSequence& s) { return s.text.find(text) != std::string::npos; });
}

ApiError length_error(const gen_state& st, size_t more) {
  return bad_request("Maximum length exceeded: the session holds " + std::to_string(st.fed) + " tokens and " +
                     std::to_string(more) + " more do not fit its max_length of " + std::to_string(st.max_length) +
                     "; open a session with a larger max_length");
}

void step(gen_actor* self, std::shared_ptr<running> r) {
  auto& st = self->state;
  const GenJob& job = *r->job;
  if (job.cancelled->load()) return finish(self, r, "cancelled");
  const std::vector<int32_t> ids = r->next_input;
  // As Petals counts: a session of max_length holds max_length fed tokens, and the token drawn after the last of
  // them is still returned (it would be fed next).
  const int64_t after = st.fed + static_cast<int64_t>(ids.size());
  if (after > st.max_length) {
    if (job.length_is_error || r->steps == 0) return fail(self, r, length_error(st, ids.size()));
    return finish(self, r, "length");
  }
  generate_request req;
  req.prompt = ids;
  req.params.max_new_tokens = 1;
  req.params.stop_at_eos = false;
  req.params.sampling = job.sampling;
  req.params.sampling.seed = job.sampling.seed + static_cast<uint64_t>(r->steps);
  const auto timeout = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(st.engine->config().request_timeout_s * 4));
  self->request(st.session, timeout, std::move(req))
      .then(
          [=](const generate_result& res) {
            auto& st = self->state;
            st.fed += static_cast<int64_t>(ids.size());
            if (res.tokens.empty()) return fail(self, r, ApiError{502, "swarm_error", "the session drew no token", ""});
            const int32_t id = res.tokens.front();
            st.drawn = id;
            if (r->steps == 0) r->result.first_token_seconds = seconds_since(self, r->start);
            r->steps++;
            r->result.completion_tokens++;
            r->since_chunk++;
            const bool eos = r->job->stop_at_eos && st.model->is_eos(id);
            TextStream::Update u;
            if (!eos || shows_end_token(*r->job, st.model->tokenizer, id)) u = r->text->push(id);
            r->chunk += u.text;
            if (u.stopped) {
              const int32_t replace = r->job->stops[*u.stopped].replace_with;
              if (replace >= 0) st.drawn = replace;
              return finish(self, r, "stop");
            }
            if (eos) return finish(self, r, "stop");
            if (r->result.completion_tokens >= r->job->max_new_tokens) return finish(self, r, "length");
            if (r->job->max_total_length > 0 && st.fed + 1 >= r->job->max_total_length)
              return finish(self, r, "length");
            if (r->since_chunk >= r->job->chunk_tokens && r->text->pending_bytes() == 0) {
              if (r->job->on_chunk) r->job->on_chunk(r->chunk, r->since_chunk);
              r->chunk.clear();
              r->since_chunk = 0;
            }
            r->next_input = {id};
            st.drawn.reset();
            step(self, r);
          },
          [=](caf::error& e) {
            auto& st = self->state;
            st.lost = "the inference session failed: " + describe(e);
            if (st.session) self->send(st.session, close_atom::value);
            st.session = nullptr;
            fail(self, r, swarm_error(e));
          });
}

caf::behavior generation_actor(gen_actor* self, std::shared_ptr<Engine> engine, std::shared_ptr<ApiModel> model) {
  self->state.engine = engine;
  self->state.model = std::move(model);
  return {
      [=](open_cmd& cmd) {
        auto& st = self->state;
        if (st.session || st.busy) {
          ApiError e = bad_request("the session is already open");
          return cmd.done(&e);
        }
        st.busy = true;
        const auto timeout = std::chrono::duration_cast<caf::timespan>(
            std::chrono::duration<double>(engine->config().request_timeout_s * 4));
        auto done = std::move(cmd.done);
        const int64_t max_length = cmd.max_length;
        auto engine = st.engine;
        self->request(st.model->client, timeout, open_session_request{max_length, 1})
            .then(
                [=](caf::actor session) {
                  auto& st = self->state;
                  st.busy = false;
                  st.session = session;
                  st.max_length = max_length;
                  st.fed = 0;
                  st.drawn.reset();
                  st.decoder.reset();
                  engine->counters().sessions_opened++;
                  done(nullptr);
                },
                [=](caf::error& e) {
                  self->state.busy = false;
                  ApiError err = swarm_error(e);
                  done(&err);
                });
      },
      [=](run_cmd& cmd) {
        auto& st = self->state;
        auto r = std::make_shared<running>();
        r->job = std::move(cmd.job);
        r->start = self->clock().now();
        if (st.busy)
          return fail(self, r, ApiError{409, "invalid_request_error", "a generation is already running", ""});
        if (!st.session)
          return fail(self, r, ApiError{503, "swarm_error", st.lost.empty() ? "the session is not open" : st.lost, ""});
        if (st.drawn) r->next_input.push_back(*st.drawn);
        r->next_input.insert(r->next_input.end(), r->job->input.begin(), r->job->input.end());
        if (r->next_input.empty()) return fail(self, r, bad_request("nothing to continue: give inputs", "inputs"));
        r->result.prompt_tokens = static_cast<int64_t>(r->job->input.size());
        std::vector<std::string> stops;
        for (const auto& s : r->job->stops) stops.push_back(s.text);
        if (!st.decoder || st.decoder_skips != r->job->skip_special) {
          st.decoder = std::make_unique<StreamDecoder>(st.model->tokenizer, r->job->skip_special);
          st.decoder_skips = r->job->skip_special;
        }
        r->text = std::make_unique<TextStream>(*st.decoder, stops, r->job->trim_stop);
        if (r->job->max_new_tokens < 1) return fail(self, r, bad_request("max_new_tokens must be at least 1"));
        st.busy = true;
        step(self, r);
      },
      [=](close_atom) {
        if (self->state.session) self->send(self->state.session, close_atom::value);
        self->state.session = nullptr;
        self->quit();
      },
  };
}

}  // namespace

GenerationSession::GenerationSession(Engine& engine, std::shared_ptr<ApiModel> model)
    : model_(model), actor_(engine.system().spawn(generation_actor, engine.shared_from_this(), std::move(model))) {}

GenerationSession::~GenerationSession() { close(); }

void GenerationSession::open(int64_t max_length, std::function<void(const ApiError*)> done) {
  std::lock_guard lock(mutex_);
  if (!actor_) {
    ApiError e{503, "swarm_error", "the session is closed", ""};
    return done(&e);
  }
  caf::anon_send(actor_, open_cmd{max_length, std::move(done)});
}

void GenerationSession::run(std::shared_ptr<GenJob> job) {
  std::lock_guard lock(mutex_);
  if (!actor_) {
    if (job->on_error) job->on_error(ApiError{503, "swarm_error", "the session is closed", ""});
    return;
  }
  caf::anon_send(actor_, run_cmd{std::move(job)});
}

void GenerationSession::close() {
  std::lock_guard lock(mutex_);
  if (actor_) caf::anon_send(actor_, close_atom::value);
  actor_ = nullptr;
}

}  // namespace corolla::api
