#include "model/tokenizer/stream_decoder.hpp"

#include "model/tokenizer/unicode.hpp"

namespace corolla {

StreamDecoder::StreamDecoder(Tokenizer tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  std::string bytes = tokenizer_.token_bytes(id, skip_special_);
  if (bytes.empty()) return {};
  if (at_start_) {
    // The text's first byte decides the leading-space rule, as in Tokenizer::decode.
    if (tokenizer_.strips_leading_space() && bytes[0] == ' ') bytes.erase(0, 1);
    at_start_ = false;
  }
  pending_ += bytes;
  const size_t hold = tok::utf8_incomplete_tail(pending_);
  std::string ready = tok::utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest = tok::utf8_lossy(pending_);
  pending_.clear();
  at_start_ = true;
  return rest;
}

}  // namespace corolla
