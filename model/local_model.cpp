#include "model/local_model.hpp"

#include <algorithm>
#include <numeric>
#include <cstring>
#include <stdexcept>
#include <string>

#include "model/train/prompt_tuning.hpp"
#include "model/train/span_training.hpp"

namespace corolla {

LocalModel::LocalModel(std::shared_ptr<WeightSource> source, Backend& backend, std::optional<DType> dtype)
    : source_(std::move(source)), backend_(backend), head_(*source_, backend, dtype) {
  for (int64_t i = 0; i < config().num_layers; ++i) blocks_.push_back(load_block(*source_, i, backend, {dtype}));
}

int64_t LocalModel::weight_bytes() const {
  int64_t n = 0;
  for (const auto& b : blocks_) n += b->weight_bytes();
  return n;
}

void LocalModel::reset(int64_t batch, int64_t max_length) {
  if (max_length <= 0 || max_length > config().max_position)
    throw std::invalid_argument("max_length " + std::to_string(max_length) + " is outside 1.." +
                                std::to_string(config().max_position));
  decode_ = {};  // recorded with the caches dropped here
  caches_.clear();
  for (auto& b : blocks_) caches_.push_back(b->make_cache(batch, max_length));
  batch_ = batch;
  cached_length_ = 0;
}

Tensor LocalModel::forward(std::span<const int32_t> ids, std::span<const int32_t> positions, bool last_only) {
  if (caches_.empty()) throw std::logic_error("LocalModel::forward before reset()");
  if (positions.size() != ids.size()) throw std::invalid_argument("one position per token id is needed");
  return forward_hidden(head_.embed(ids, batch_), positions, last_only);
}

void LocalModel::reorder(std::span<const int32_t> sources) {
  for (auto& c : caches_) c.reorder(sources);
  decode_ = {};  // a recording holds the tables it was made with
}

void LocalModel::run_blocks(Tensor& hidden, std::span<const int32_t> positions, const Tensor& deep_prompts) {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    caches_[i].make_writable(backend_, positions, hidden.dim(1));  // (beam search: a shared page copied first)
    if (has_prompts(deep_prompts)) add_block_prompts(backend_, hidden, deep_prompts, static_cast<int64_t>(i));
    blocks_[i]->forward(hidden, positions, &caches_[i], adapter_ ? adapter_->block(blocks_[i]->index()) : nullptr);
  }
}

bool LocalModel::replay_decode(Tensor& hidden, std::span<const int32_t> positions) {
  if (!decode_.tried || decode_.shape != hidden.shape() || decode_.adapter != adapter_.get()) {
    decode_ = {};
    decode_.tried = true;
    decode_.shape = hidden.shape();
    decode_.adapter = adapter_.get();
    if (std::all_of(blocks_.begin(), blocks_.end(), [](const auto& b) { return b->recordable(); }))
      decode_.steps = backend_.record(hidden, positions,
                                      [this](Tensor& io, std::span<const int32_t> p) { run_blocks(io, p, Tensor()); });
  }
  if (!decode_.steps) return false;
  decode_.steps->replay(hidden, positions);
  return true;
}

Tensor LocalModel::forward_hidden(Tensor hidden, std::span<const int32_t> positions, bool last_only,
                                  const Tensor& deep_prompts) {
  if (caches_.empty()) throw std::logic_error("LocalModel::forward before reset()");
  if (hidden.rank() != 3 || hidden.dim(0) != batch_ ||
      static_cast<int64_t>(positions.size()) != hidden.dim(0) * hidden.dim(1))
    throw std::invalid_argument("hidden states " + hidden.describe() + " with " + std::to_string(positions.size()) +
                                " positions do not fit a batch of " + std::to_string(batch_));
  if (auto problem = check_prompts(deep_prompts, hidden, static_cast<int64_t>(blocks_.size())); !problem.empty())
    throw std::invalid_argument(problem);
  const int64_t max_length = caches_.front().max_length();
  for (int32_t p : positions)
    if (p < 0 || p >= max_length)
      throw std::invalid_argument("position " + std::to_string(p) + " is beyond max_length " +
                                  std::to_string(max_length));
  const bool reordered = !caches_.empty() && caches_.front().version() != 0;
  const bool decode = hidden.dim(1) == 1 && !has_prompts(deep_prompts) && !reordered;
  if (!decode || !replay_decode(hidden, positions)) run_blocks(hidden, positions, deep_prompts);
  const int64_t t = hidden.dim(1);
  cached_length_ = std::max<int64_t>(cached_length_, positions.back() + 1);
  if (!last_only) return head_.logits(hidden);
  Tensor host = backend_.download(hidden);
  Tensor last = Tensor::empty(DType::f32, {batch_, config().hidden_size});
  for (int64_t b = 0; b < batch_; ++b)
    std::copy_n(host.data_as<const float>() + ((b + 1) * t - 1) * config().hidden_size, config().hidden_size,
                last.data_as<float>() + b * config().hidden_size);
  return head_.logits(backend_.upload(last));
}

Tensor LocalModel::forward_uncached(std::span<const int32_t> ids, int64_t batch, std::span<const int32_t> positions) {
  Tensor hidden = head_.embed(ids, batch);
  for (auto& b : blocks_) b->forward(hidden, positions, nullptr, adapter_ ? adapter_->block(b->index()) : nullptr);
  return head_.logits(hidden);
}

namespace {

// Beam search over `prompt` in num_beams sequences of the model's caches.
std::vector<int32_t> generate_beams(LocalModel& model, std::span<const int32_t> prompt, const GenerationParams& params,
                                    const TokenCallback& on_token) {
  const int64_t beams = params.num_beams, t = static_cast<int64_t>(prompt.size());
  model.reset(beams, t + params.max_new_tokens);
  BeamSearch search(beam_search_params(params, model.config()));
  const BeamPrompt first = beam_prompt(prompt, beams);
  Tensor logits = model.head().backend().download(model.forward(first.ids, first.positions, true));
  for (;;) {
    const BeamSearch::Step step =
        search.advance({logits.data_as<const float>(), static_cast<size_t>(logits.numel())}, logits.dim(1));
    if (step.done) break;
    model.reorder(step.sources);
    const std::vector<int32_t> at(static_cast<size_t>(beams), static_cast<int32_t>(t + search.generated() - 1));
    logits = model.head().backend().download(model.forward(step.tokens, at, true));
  }
  hand_over(search.best(), end_tokens(params, model.config()), on_token);
  return search.best();
}

}  // namespace

std::vector<int32_t> generate(LocalModel& model, std::span<const int32_t> prompt, const GenerationParams& params,
                              const TokenCallback& on_token, const TunedPrompts* tuned) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  if (auto problem = generation_problem(params); !problem.empty()) throw std::invalid_argument(problem);
  if (params.num_beams > 1) {
    if (tuned) throw std::invalid_argument("beam search after tuned prompts is not supported");
    if (static_cast<int64_t>(prompt.size()) + params.max_new_tokens > model.config().max_position)
      throw std::invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens plus " +
                                  std::to_string(params.max_new_tokens) + " new tokens exceeds the context of " +
                                  std::to_string(model.config().max_position));
    return generate_beams(model, prompt, params, on_token);
  }
  const int64_t prefix = tuned ? tuned->length() : 0;
  const int64_t total = prefix + static_cast<int64_t>(prompt.size()) + params.max_new_tokens;
  if (total > model.config().max_position)
    throw std::invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens plus " +
                                (prefix ? std::to_string(prefix) + " tuned prompts plus " : std::string()) +
                                std::to_string(params.max_new_tokens) + " new tokens exceeds the context of " +
                                std::to_string(model.config().max_position));
  model.reset(1, total);
  TokenGeneration generation(params, end_tokens(params, model.config()), {prompt.begin(), prompt.end()}, on_token);
  std::vector<int32_t> positions(static_cast<size_t>(prefix) + prompt.size());
  std::iota(positions.begin(), positions.end(), 0);
  Tensor logits;
  if (!tuned) {
    logits = model.forward(prompt, positions, true);
  } else {
    // The tuned prompts, then the prompt's embeddings: one sequence [1, P + T, D].
    const int64_t d = model.config().hidden_size, t = static_cast<int64_t>(prompt.size());
    Backend& be = model.head().backend();
    const Tensor embeds = be.download(model.head().embed(prompt, 1));
    Tensor hidden = Tensor::empty(DType::f32, {1, prefix + t, d});
    std::memcpy(hidden.data(), tuned->prompts.data(), static_cast<size_t>(prefix * d) * 4);
    std::memcpy(hidden.data_as<float>() + prefix * d, embeds.data(), static_cast<size_t>(t * d) * 4);
    Tensor deep;
    if (tuned->deep_prompts.defined()) deep = tuned->deep_prompts.reshaped({tuned->deep_prompts.dim(0), 1, prefix, d});
    logits = model.forward_hidden(be.upload(hidden), positions, true, deep);
  }
  int32_t pos = static_cast<int32_t>(positions.size());
  return run_generation(generation, std::move(logits), [&](int32_t next) {
    const int32_t at = pos++;
    return model.forward({&next, 1}, {&at, 1}, true);
  });
}

}  // namespace corolla
