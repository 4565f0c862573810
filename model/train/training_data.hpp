// Training examples and batches for prompt tuning.
//
// A data file is JSON Lines, one example per line:
//   {"text": "The capital of France is Paris."}          LM: learn to continue the text (needs a tokenizer)
//   {"ids": [1, 415, 5565, 302]}                         LM on token ids
//   {"text": "great movie", "label": 1}                  classification (with "ids" too)
// Empty lines are skipped; anything else that is not such an object is an error naming the line.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace corolla {

class Tokenizer;

struct TrainingExample {
  std::vector<int32_t> ids;
  int32_t label = -1;  // classification only
};

// Sequences padded to one length (right padding: with causal attention, padding never affects the real tokens
// before it, and the loss ignores it).
struct TrainingBatch {
  int64_t batch = 0, length = 0;
  std::vector<int32_t> ids;      // [batch, length], padded with pad_id
  std::vector<int64_t> lengths;  // real tokens of each sequence (≥ 1)
  std::vector<int32_t> labels;   // one per sequence when classifying, else empty
  int64_t tokens() const;        // real tokens in the batch
};

// Throws std::invalid_argument naming the file and line for a malformed example, an example with text but no
// tokenizer, an empty example, or one longer than max_length tokens (cut to max_length when truncate is set).
std::vector<TrainingExample> read_training_jsonl(const std::string& path, const Tokenizer* tokenizer,
                                                 int64_t max_length, bool truncate = true);

// The examples as one padded batch. Throws when one is empty or labels are mixed with unlabelled examples.
TrainingBatch make_batch(std::span<const TrainingExample> examples, int32_t pad_id);

}  // namespace corolla
