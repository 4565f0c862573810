// A whole model in one process: client head plus every block with its KV cache. The reference the swarm is
// checked against, and the engine behind `corolla generate --model M` without peers.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "model/block.hpp"
#include "model/client_head.hpp"
#include "model/generation.hpp"

namespace corolla {

struct TunedPrompts;  // model/train/prompt_tuning.hpp

class LocalModel {
 public:
  LocalModel(std::shared_ptr<WeightSource> source, Backend& backend, std::optional<DType> dtype = std::nullopt);

  const ModelConfig& config() const { return head_.config(); }
  // Applies a LoRA adapter (loaded for every block) from now on; nullptr removes it.
  void set_adapter(std::shared_ptr<const LoraAdapter> adapter) {
    decode_ = {};  // recorded with the old adapter's tensors
    adapter_ = std::move(adapter);
  }
  const ClientHead& head() const { return head_; }
  int64_t weight_bytes() const;

  // Starts new sequences: drops the KV caches and makes room for `batch` sequences of `max_length` tokens.
  void reset(int64_t batch, int64_t max_length);
  // Feeds ids [batch, T] at `positions` (one per id) through every block with the caches; returns the logits of
  // every token [batch·T, vocab] or, with last_only, of the last token of each sequence [batch, vocab].
  Tensor forward(std::span<const int32_t> ids, std::span<const int32_t> positions, bool last_only);
  // The same from hidden states [batch, T, hidden] on the backend (token embeddings, or tuned prompts followed by
  // them). Deep prompts [L, batch, P, hidden] (host; undefined for none) are added to the first P of these T
  // tokens before each block (Petals' deep prompt tuning: only the call that starts the sequences passes them).
  Tensor forward_hidden(Tensor hidden, std::span<const int32_t> positions, bool last_only,
                        const Tensor& deep_prompts = Tensor());
  // Beam search: sequence b continues what sequence sources[b] holds, in every block's cache.
  void reorder(std::span<const int32_t> sources);
  // Same without touching the caches (each sequence attends only to its own ids).
  Tensor forward_uncached(std::span<const int32_t> ids, int64_t batch, std::span<const int32_t> positions);
  int64_t cached_length() const { return cached_length_; }

 private:
  std::shared_ptr<WeightSource> source_;
  Backend& backend_;
  ClientHead head_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<KVCache> caches_;
  // A single-token step through every block recorded once (Backend::record: one CUDA graph per token) for the batch
  // shape and adapter it was made with; `steps` stays empty where the backend does not record or a block cannot be
  // recorded (a mixture of experts routes on the host).
  struct DecodeRecording {
    bool tried = false;
    Shape shape;
    const LoraAdapter* adapter = nullptr;
    std::unique_ptr<Recording> steps;
  } decode_;
  // Every block on hidden at positions, with the caches; the adapter's pairs where it has some.
  void run_blocks(Tensor& hidden, std::span<const int32_t> positions, const Tensor& deep_prompts);
  // A single-token step through decode_ (made if need be); false where there is none.
  bool replay_decode(Tensor& hidden, std::span<const int32_t> positions);
  std::shared_ptr<const LoraAdapter> adapter_;
  int64_t batch_ = 0;
  int64_t cached_length_ = 0;
};

// Generates after `prompt` (one sequence) by a TokenGeneration (model/generation.hpp), or a beam search. on_token is
// called with each new id as soon as it is chosen and may return false to stop (with beam search, with the best
// hypothesis's ids once the search ends). Returns the new ids.
// With `tuned` (prompt tuning), its prompts come first (and its deep prompts enter every block with them).
std::vector<int32_t> generate(LocalModel& model, std::span<const int32_t> prompt, const GenerationParams& params,
                              const TokenCallback& on_token = {}, const TunedPrompts* tuned = nullptr);

}  // namespace corolla
