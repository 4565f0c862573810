// Generation over the session's steps: one token at a time by a TokenGeneration (model/generation.hpp; the loop
// is one continuation per step: feed, the head's logits, choose), or a beam search over the session's sequences.
#include <caf/all.hpp>
#include <cstring>
#include <numeric>

#include "actors/client/head_batcher.hpp"
#include "actors/client/session_state.hpp"
#include "actors/protocol/errors.hpp"

namespace corolla::session {
namespace {

struct generation {
  caf::typed_response_promise<generate_result> rp;
  std::unique_ptr<TokenGeneration> tokens;
  caf::actor_clock::time_point start;
};

// Embeddings of `ids`, after the tuned prompt embeddings `prefix` [P, D] when there are some: [1, P + T, D].
Tensor embed_after(const ClientHead& head, const std::vector<int32_t>& ids, const Tensor& prefix) {
  Tensor embeds = head.backend().download(head.embed(ids, 1));
  if (!prefix.defined()) return embeds;
  const int64_t p = prefix.dim(0), t = embeds.dim(1), d = embeds.dim(2);
  Tensor out = Tensor::empty(DType::f32, {1, p + t, d});
  std::memcpy(out.data(), prefix.data(), static_cast<size_t>(prefix.nbytes()));
  std::memcpy(out.data_as<float>() + p * d, embeds.data(), static_cast<size_t>(embeds.nbytes()));
  return out;
}

void end_generation(session_actor* self, const std::shared_ptr<generation>& g, caf::expected<generate_result> r) {
  self->state.busy = false;
  if (!r) {
    g->rp.deliver(r.error());
    return;
  }
  r->seconds = std::chrono::duration<double>(self->clock().now() - g->start).count();
  g->rp.deliver(std::move(*r));
}

// One step of the generation loop (model/generation.hpp's run_generation, a continuation per step): feeds `ids`
// through the route, asks the head for the logits of the last one, and lets the generation choose the next token;
// goes on with it or ends (the ending token is not fed: the session holds every token but it).
void generate_step(session_actor* self, std::shared_ptr<generation> g, std::vector<int32_t> ids,
                   Tensor prefix = Tensor()) {
  auto& st = self->state;
  Tensor hidden;
  try {
    hidden = embed_after(*st.head, ids, prefix);
  } catch (const std::exception& e) {
    return end_generation(self, g, make_error(errc::bad_request, e.what()));
  }
  std::vector<int32_t> positions(static_cast<size_t>(hidden.dim(1)));
  std::iota(positions.begin(), positions.end(), static_cast<int32_t>(st.length));
  run_route(self, hidden, positions, [=](caf::expected<Tensor> out) {
    auto& st = self->state;
    if (!out) return end_generation(self, g, out.error());
    st.length += static_cast<int64_t>(positions.size());
    st.tokens.insert(st.tokens.end(), ids.begin(), ids.end());
    const int64_t t = out->dim(1), d = out->dim(2);
    self->request(st.head_batcher, caf::infinite, head_rows{out->reshaped({t, d}).slice_rows(t - 1, t)})
        .then(
            [=](const Tensor& logits) {
              TokenGeneration& tokens = *g->tokens;
              if (tokens.advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())}))
                return generate_step(self, g, {tokens.last()});
              end_generation(self, g, generate_result{tokens.tokens(), 0, tokens.end()});
            },
            [=](caf::error& e) { end_generation(self, g, std::move(e)); });
  });
}

// Beam search (model/beam_search.hpp): the session's num_beams sequences are the beams. The prompt goes to all
// of them at once; each step feeds every running beam its next token, with the step's hypothesis ids reordering
// the servers' caches (and the session's histories) as the search moved the beams.
struct beam_generation {
  caf::typed_response_promise<generate_result> rp;
  generate_request req;
  std::unique_ptr<BeamSearch> search;
  int64_t prompt_length = 0;
  caf::actor_clock::time_point start;
};

void beam_step(session_actor* self, std::shared_ptr<beam_generation> g, const std::vector<int32_t>& ids,
               std::vector<int32_t> positions, std::vector<int32_t> sources) {
  auto& st = self->state;
  const int64_t beams = g->req.params.num_beams, t = static_cast<int64_t>(ids.size()) / beams;
  auto fail = [self, g](caf::error e) {
    self->state.busy = false;
    g->rp.deliver(std::move(e));
  };
  Tensor hidden;
  try {
    hidden = st.head->backend().download(st.head->embed(ids, beams));
  } catch (const std::exception& e) {
    return fail(make_error(errc::bad_request, e.what()));
  }
  run_route(
      self, hidden, std::move(positions),
      [=](caf::expected<Tensor> out) {
        auto& st = self->state;
        if (!out) return fail(out.error());
        st.length += t;
        const int64_t d = out->dim(2);
        Tensor last = Tensor::empty(DType::f32, {beams, d});  // each beam's last token
        for (int64_t b = 0; b < beams; ++b)
          std::memcpy(last.data_as<float>() + b * d, out->data_as<const float>() + ((b + 1) * t - 1) * d,
                      static_cast<size_t>(d) * sizeof(float));
        self->request(st.head_batcher, caf::infinite, head_rows{last})
            .then(
                [=](const Tensor& logits) {
                  BeamSearch::Step next;
                  try {
                    next = g->search->advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())},
                                              logits.dim(1));
                  } catch (const std::exception& e) {
                    return fail(make_error(errc::internal, e.what()));
                  }
                  if (next.done) {
                    self->state.busy = false;
                    const std::vector<int32_t>& best = g->search->best();
                    const GenerationEnd end =
                        hand_over(best, end_tokens(g->req.params, self->state.head->config()), g->req.on_token);
                    const double secs = std::chrono::duration<double>(self->clock().now() - g->start).count();
                    g->rp.deliver(generate_result{best, secs, end});
                    return;
                  }
                  const auto at = static_cast<int32_t>(g->prompt_length + g->search->generated() - 1);
                  beam_step(self, g, next.tokens, std::vector<int32_t>(static_cast<size_t>(beams), at),
                            std::move(next.sources));
                },
                [=](caf::error& e) { fail(std::move(e)); });
      },
      std::move(sources));
}

// Why a beam search of `req` cannot run in this session (none: it can): it needs a fresh session of num_beams
// sequences.
caf::error beam_search_refusal(const session_state& st, const generate_request& req) {
  const GenerationParams& p = req.params;
  if (auto problem = generation_problem(p); !problem.empty()) return make_error(errc::bad_request, problem);
  if (st.opt.batch != p.num_beams)
    return make_error(errc::bad_request, "a beam search of " + std::to_string(p.num_beams) +
                                             " beams runs in a session of as many sequences; this one has " +
                                             std::to_string(st.opt.batch));
  if (st.length > 0 || req.prefix.defined())
    return make_error(errc::bad_request, "a beam search starts a session (no tokens before its prompt)");
  return {};
}

// Starts a beam search over the prompt (beam_search_refusal said it can run).
void start_beam_search(session_actor* self, std::shared_ptr<beam_generation> g) {
  auto& st = self->state;
  const GenerationParams& p = g->req.params;
  g->search = std::make_unique<BeamSearch>(beam_search_params(p, st.head->config()));
  g->prompt_length = static_cast<int64_t>(g->req.prompt.size());
  BeamPrompt first = beam_prompt(g->req.prompt, p.num_beams);
  st.busy = true;
  beam_step(self, g, first.ids, std::move(first.positions), {});
}

// The request's token callback, after the subscriber's message: where every token of the generation goes.
TokenCallback streamed(const generate_request& req) {
  if (!req.subscriber) return req.on_token;
  return [subscriber = req.subscriber, then = req.on_token](int32_t id) {
    caf::anon_send(subscriber, token_atom::value, id);
    return !then || then(id);
  };
}

}  // namespace

caf::result<generate_result> start_generation(session_actor* self, generate_request& req) {
  auto& st = self->state;
  if (st.busy || st.current) return make_error(errc::bad_request, "a generation is already running in this session");
  if (req.prompt.empty()) return make_error(errc::bad_request, "the prompt is empty");
  const int64_t prefix = req.prefix.defined() ? req.prefix.dim(0) : 0;
  if (req.prefix.defined()) {
    if (req.prefix.dtype() != DType::f32 || req.prefix.rank() != 2 ||
        req.prefix.dim(1) != st.head->config().hidden_size)
      return make_error(errc::bad_request, "tuned prompts must be f32[length, " +
                                               std::to_string(st.head->config().hidden_size) + "], got " +
                                               req.prefix.describe());
    if (st.length > 0)
      return make_error(errc::bad_request, "tuned prompts go at the start of a session, which holds " +
                                               std::to_string(st.length) + " tokens already");
  }
  // Positions the generation takes: the prompt's, and one per new token but the last, which is drawn from
  // the last step and never fed here (a session of max_length holds max_length tokens, as in Petals).
  const int64_t need = st.length + prefix + static_cast<int64_t>(req.prompt.size()) +
                       std::max<int64_t>(req.params.max_new_tokens - 1, 0);
  if (need > st.opt.max_length)
    return make_error(errc::max_length_exceeded, "the session holds " + std::to_string(st.length) + " tokens; " +
                                                     std::to_string(req.prompt.size()) + " more and " +
                                                     std::to_string(req.params.max_new_tokens) +
                                                     " new ones (all but the last fed) exceed its max_length " +
                                                     std::to_string(st.opt.max_length));
  req.on_token = streamed(req);
  if (req.params.num_beams != 1) {
    if (auto refusal = beam_search_refusal(st, req)) return refusal;
    auto beams = std::make_shared<beam_generation>();
    beams->rp = self->make_response_promise<generate_result>();
    beams->start = self->clock().now();
    beams->req = std::move(req);
    start_beam_search(self, beams);
    return beams->rp;
  }
  auto g = std::make_shared<generation>();
  std::vector<int32_t> history = st.tokens;
  history.insert(history.end(), req.prompt.begin(), req.prompt.end());
  try {
    g->tokens = std::make_unique<TokenGeneration>(req.params, end_tokens(req.params, st.head->config()),
                                                  std::move(history), req.on_token);
  } catch (const std::exception& e) {
    return make_error(errc::bad_request, e.what());
  }
  g->rp = self->make_response_promise<generate_result>();
  g->start = self->clock().now();
  std::vector<int32_t> prompt = std::move(req.prompt);
  Tensor prefix_embeddings = std::move(req.prefix);
  st.busy = true;
  generate_step(self, g, std::move(prompt), std::move(prefix_embeddings));
  return g->rp;
}

}  // namespace corolla::session
