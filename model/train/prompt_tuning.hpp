// Prompt tuning on the client (Petals' ptune and deep_ptune), with a trainable head: the small trainable part of
// a model whose blocks stay frozen (and may run on a swarm).
//
//   ptune       trainable prompt embeddings [P, D] prepended to every sequence's token embeddings;
//   deep_ptune  also trainable prompts [L, P, D] for every block, added to the first P positions before it runs
//               (they travel to the servers as [L, B, P, D]; their gradients come back).
// Heads: the model's LM head (next-token loss; frozen, or trainable as an f32 copy), or a classifier [C, D] on the
// last real token of each sequence (always trainable). Both after the model's final norm, which stays frozen.
//
// One step: inputs() gives the blocks' input; the blocks run forward; loss() gives the loss and the gradient of
// the blocks' output (and accumulates the head's gradient); the blocks run backward; accumulate() adds the
// gradients of the prompts; apply() takes one Adam step and clears the gradients.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/client_head.hpp"
#include "model/train/adam.hpp"
#include "model/train/training_data.hpp"

namespace corolla {

enum class TuningMode { ptune, deep_ptune };
std::optional<TuningMode> parse_tuning_mode(std::string_view name);
std::string_view tuning_mode_name(TuningMode mode);

enum class TrainingHead { lm, classifier };

struct TuningOptions {
  TuningMode mode = TuningMode::ptune;
  int64_t pre_seq_len = 16;
  TrainingHead head = TrainingHead::lm;
  int64_t num_labels = 2;      // classifier only
  bool train_lm_head = false;  // lm only: train an f32 copy of the LM head too
  AdamOptions adam;
  uint64_t seed = 0;  // initial prompts and classifier weights
};

// `mode` with `pre_seq_len` prompt tokens and `head`, everything else as default.
inline TuningOptions tuning_options(TuningMode mode, int64_t pre_seq_len, TrainingHead head = TrainingHead::lm) {
  TuningOptions o;
  o.mode = mode;
  o.pre_seq_len = pre_seq_len;
  o.head = head;
  return o;
}

// What one step sends through the blocks.
struct BlockInputs {
  Tensor hidden;                   // [B, P + T, D] host f32
  std::vector<int32_t> positions;  // 0 .. P + T - 1 for every sequence
  Tensor prompts;                  // deep_ptune: [L, B, P, D] host f32; ptune: none (undefined)
};

struct HeadLoss {
  double loss = 0;  // mean cross-entropy
  Tensor grad;      // gradient of the blocks' output [B, P + T, D], host f32
};

class PromptTuning {
 public:
  PromptTuning(std::shared_ptr<const ClientHead> head, TuningOptions options);

  const TuningOptions& options() const { return options_; }
  int64_t steps() const { return adam_.steps(); }

  // Throws std::invalid_argument when the batch does not suit the head (labels missing or out of range).
  BlockInputs inputs(const TrainingBatch& batch) const;
  HeadLoss loss(const TrainingBatch& batch, const Tensor& blocks_out);
  // grad_in: gradient of inputs().hidden; grad_prompts: of inputs().prompts (deep_ptune).
  void accumulate(const TrainingBatch& batch, const Tensor& grad_in, const Tensor& grad_prompts);
  void apply();

  // Trainable tensors by name: "prompts" [P, D], "deep_prompts" [L, P, D], "score" [C, D] or "lm_head" [V, D].
  std::vector<std::pair<std::string, Tensor>> parameters() const;
  std::vector<std::pair<std::string, Tensor>> gradients() const;
  // Replaces parameters by name (shapes must match); throws naming an unknown or mis-shaped one.
  void set_parameters(const std::map<std::string, Tensor>& values);
  // The parameters as a safetensors file (what `corolla generate --prompts` reads).
  void save(const std::string& path) const;

 private:
  struct Param {
    std::string name;
    Tensor value, grad;
  };
  Param* find(const std::string& name);
  // The head's matrix: the trainable copy or the model's frozen LM head.
  const Tensor& head_weight() const;

  std::shared_ptr<const ClientHead> head_;
  TuningOptions options_;
  std::vector<Param> params_;
  Adam adam_;
};

// Prompts read back from a file written by PromptTuning::save: "prompts" [P, D] and, for deep_ptune,
// "deep_prompts" [L, P, D]. Throws naming the file when shapes do not fit the model.
struct TunedPrompts {
  Tensor prompts;       // [P, D]
  Tensor deep_prompts;  // [L, P, D] or undefined
  int64_t length() const { return prompts.dim(0); }
};
TunedPrompts load_tuned_prompts(const std::string& path, const ModelConfig& config);

}  // namespace corolla
