// The text of a generation as it streams: decodes tokens one at a time (never a broken UTF-8 character), finds
// stop sequences, and says how much text may be shown so far. Plain C++ (no actors, no HTTP): the API's
// generation actor drives it, and unit tests check it token by token.
//
// Two ways to treat a stop sequence:
//   trim (OpenAI):   the text ends before the stop sequence, which is never shown: text that might be the start
//                    of one is held back until the next token tells.
//   keep (Petals):   everything is shown as it comes, the stop sequence included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace corolla::api {

class TextStream {
 public:
  // `decoder` may outlive the stream: a session's decoder carries the bytes of a character that is still
  // incomplete from one generation to the next.
  TextStream(StreamDecoder& decoder, std::vector<std::string> stops, bool trim_stop);

  struct Update {
    std::string text;               // new text that may be shown now (possibly empty)
    std::optional<size_t> stopped;  // index of the stop sequence found (generation must end)
  };
  // Adds one generated token.
  Update push(int32_t id);
  // Ends the stream without a stop sequence (end of sequence, length, cancelled): the text still held back, and
  // with `flush` the decoder's incomplete character (as U+FFFD); without it that character stays in the decoder
  // for the next stream.
  std::string finish(bool flush = true);

  // Every byte decoded so far (before trimming).
  const std::string& all() const { return all_; }
  // The text shown so far (including what push/finish returned last).
  std::string shown() const { return all_.substr(0, shown_); }
  // Bytes of a character still incomplete (a chunk should wait for them).
  size_t pending_bytes() const { return decoder_.pending(); }

 private:
  size_t holdback() const;

  StreamDecoder& decoder_;
  std::vector<std::string> stops_;
  bool trim_;
  std::string all_;
  size_t shown_ = 0;
  bool done_ = false;
};

}  // namespace corolla::api
