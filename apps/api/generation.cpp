#include "apps/api/generation.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

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

using steady = std::chrono::steady_clock;

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

// One job in progress. While it runs, the session calls take_token on its own thread with each token; this actor
// touches nothing of it meanwhile (it is busy), and the job holds what the callback reads.
struct running {
  std::shared_ptr<GenJob> job;
  std::shared_ptr<const ApiModel> model;
  std::shared_ptr<StreamDecoder> decoder;  // the session's text across jobs, which `text` reads
  std::unique_ptr<TextStream> text;
  GenResult result;
  int64_t limit = 0;                 // tokens the session was asked for
  std::optional<size_t> stopped_at;  // the stop sequence that ended the job
  int64_t since_chunk = 0;
  std::string chunk;
  steady::time_point start;
};

struct gen_state {
  std::shared_ptr<Engine> engine;  // kept alive while the session runs
  std::shared_ptr<ApiModel> model;
  inference_session_actor session;  // none until opened, or after it failed
  std::string lost;                 // why the session is gone, when it is
  int64_t max_length = 0;
  int64_t fed = 0;                         // positions the session holds
  std::optional<int32_t> drawn;            // the last token drawn, not yet fed
  std::shared_ptr<StreamDecoder> decoder;  // the session's text, across jobs
  bool decoder_skips = true;
  bool busy = false;
  static inline const char* name = "api_generation";
};

using gen_actor = caf::stateful_actor<gen_state>;

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
  r->result.seconds = seconds_since(r->start);
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

// The generation's token callback (on the session's thread): the token's text, stop sequences, chunks, and
// cancellation. Returns whether the generation goes on.
bool take_token(running& r, int32_t id) {
  const GenJob& job = *r.job;
  if (r.result.completion_tokens == 0) r.result.first_token_seconds = seconds_since(r.start);
  r.result.completion_tokens++;
  r.since_chunk++;
  const auto& ends = r.model->end_ids;
  const bool end = job.stop_at_eos && std::find(ends.begin(), ends.end(), id) != ends.end();
  TextStream::Update u;
  if (!end || shows_end_token(job, r.model->tokenizer, id)) u = r.text->push(id);
  r.chunk += u.text;
  if (u.stopped) {
    r.stopped_at = *u.stopped;
    return false;
  }
  if (job.cancelled->load()) return false;
  const bool last = end || r.result.completion_tokens >= r.limit;  // the job's end sends what is left
  if (!last && r.since_chunk >= job.chunk_tokens && r.text->pending_bytes() == 0) {
    if (job.on_chunk) job.on_chunk(r.chunk, r.since_chunk);
    r.chunk.clear();
    r.since_chunk = 0;
  }
  return true;
}

ApiError length_error(const gen_state& st, size_t more) {
  return bad_request("Maximum length exceeded: the session holds " + std::to_string(st.fed) + " tokens and " +
                     std::to_string(more) + " more do not fit its max_length of " + std::to_string(st.max_length) +
                     "; open a session with a larger max_length");
}

// Runs the job as one generation of the session (model/generation.hpp), feeding `ids` first. As Petals counts, a
// session of max_length holds max_length fed tokens, and the token drawn after the last of them is still
// returned (it would be fed next): so the session can draw one token more than it has room for.
void generate(gen_actor* self, std::shared_ptr<running> r, std::vector<int32_t> ids) {
  auto& st = self->state;
  const GenJob& job = *r->job;
  const int64_t fed_after_input = st.fed + static_cast<int64_t>(ids.size());
  if (fed_after_input > st.max_length) return fail(self, r, length_error(st, ids.size()));
  const int64_t session_room = st.max_length - fed_after_input + 1;
  // max_total_length: the job ends once the session would hold that many tokens with the one drawn.
  const int64_t total_room = job.max_total_length > 0 ? std::max<int64_t>(1, job.max_total_length - fed_after_input)
                                                      : std::numeric_limits<int64_t>::max();
  r->limit = std::min({job.max_new_tokens, session_room, total_room});
  const bool out_of_session = r->limit == session_room && r->limit < job.max_new_tokens && r->limit < total_room;
  generate_request req;
  req.prompt = ids;
  req.params.max_new_tokens = r->limit;
  req.params.sampling = job.sampling;
  req.params.stop_at_eos = job.stop_at_eos;
  req.params.eos_token_ids = st.model->end_ids;
  req.on_token = [r](int32_t id) { return take_token(*r, id); };
  self->request(st.session, caf::infinite, std::move(req))
      .then(
          [=](const generate_result& res) {
            auto& st = self->state;
            if (res.tokens.empty()) return fail(self, r, ApiError{502, "swarm_error", "the session drew no token", ""});
            st.fed = fed_after_input + static_cast<int64_t>(res.tokens.size()) - 1;
            st.drawn = res.tokens.back();
            switch (res.end) {
              case GenerationEnd::stopped:
                if (!r->stopped_at) return finish(self, r, "cancelled");
                if (const int32_t replace = r->job->stops[*r->stopped_at].replace_with; replace >= 0)
                  st.drawn = replace;
                return finish(self, r, "stop");
              case GenerationEnd::end_token: return finish(self, r, "stop");
              default:
                if (out_of_session && r->job->length_is_error) return fail(self, r, length_error(st, 1));
                return finish(self, r, "length");
            }
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
                [=](inference_session_actor session) {
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
        r->model = st.model;
        r->start = steady::now();
        if (st.busy)
          return fail(self, r, ApiError{409, "invalid_request_error", "a generation is already running", ""});
        if (!st.session)
          return fail(self, r, ApiError{503, "swarm_error", st.lost.empty() ? "the session is not open" : st.lost, ""});
        std::vector<int32_t> ids;
        if (st.drawn) ids.push_back(*st.drawn);
        ids.insert(ids.end(), r->job->input.begin(), r->job->input.end());
        if (ids.empty()) return fail(self, r, bad_request("nothing to continue: give inputs", "inputs"));
        r->result.prompt_tokens = static_cast<int64_t>(r->job->input.size());
        std::vector<std::string> stops;
        for (const auto& s : r->job->stops) stops.push_back(s.text);
        if (!st.decoder || st.decoder_skips != r->job->skip_special) {
          st.decoder = std::make_shared<StreamDecoder>(st.model->tokenizer, r->job->skip_special);
          st.decoder_skips = r->job->skip_special;
        }
        r->decoder = st.decoder;
        r->text = std::make_unique<TextStream>(*r->decoder, stops, r->job->trim_stop);
        if (r->job->max_new_tokens < 1) return fail(self, r, bad_request("max_new_tokens must be at least 1"));
        st.busy = true;
        generate(self, r, std::move(ids));
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
