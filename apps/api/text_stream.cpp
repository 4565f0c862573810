#include "apps/api/text_stream.hpp"

#include <algorithm>

namespace corolla::api {

TextStream::TextStream(StreamDecoder& decoder, std::vector<std::string> stops, bool trim_stop)
    : decoder_(decoder), trim_(trim_stop) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

// The longest end of the unshown text that is the start of a stop sequence (not a whole one).
size_t TextStream::holdback() const {
  size_t best = 0;
  const size_t unshown = all_.size() - shown_;
  for (const auto& stop : stops_)
    for (size_t k = std::min(stop.size() - 1, unshown); k > best; --k)
      if (all_.compare(all_.size() - k, k, stop, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

TextStream::Update TextStream::push(int32_t id) {
  Update u;
  if (done_) return u;
  const size_t before = all_.size();
  all_ += decoder_.push(id);
  // Where a stop sequence may start: after the shown text when trimming (text that could start one is never
  // shown), else anywhere that overlaps the new text.
  size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  const size_t from = trim_ ? shown_ : (before >= longest ? before - longest + 1 : 0);
  size_t first = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = all_.find(stops_[i], from);
    if (at != std::string::npos && at < first) {
      first = at;
      u.stopped = i;
    }
  }
  if (u.stopped) {
    done_ = true;
    const size_t end = trim_ ? first : all_.size();
    u.text = all_.substr(shown_, end - shown_);
    shown_ = end;
    return u;
  }
  const size_t end = trim_ ? all_.size() - holdback() : all_.size();
  u.text = all_.substr(shown_, end - shown_);
  shown_ = end;
  return u;
}

std::string TextStream::finish(bool flush) {
  if (done_) return {};
  done_ = true;
  if (flush) all_ += decoder_.flush();
  std::string rest = all_.substr(shown_);
  shown_ = all_.size();
  return rest;
}

}  // namespace corolla::api
