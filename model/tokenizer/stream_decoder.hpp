// Streaming detokenizer: takes generated ids one at a time and returns the text that is complete so far. Bytes
// of a character split across tokens (byte-level BPE, SentencePiece byte fallback) are held back until the
// character is whole, so a stream never shows a broken character; ill-formed bytes become U+FFFD.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.hpp"

namespace corolla {

class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special = true);

  // Adds one token; returns the newly complete text (possibly empty). Throws std::invalid_argument for an id
  // outside the vocabulary.
  std::string push(int32_t id);
  // Ends the stream: returns what is held back (an incomplete character becomes U+FFFD) and starts afresh.
  std::string flush();
  // Bytes held back, waiting for the rest of a character.
  size_t pending() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace corolla
