#include "model/tokenizer/added_tokens.hpp"

#include <algorithm>

#include "model/tokenizer/unicode.hpp"

namespace corolla::tok {
namespace {

// Unicode White_Space (Rust's char::is_whitespace, which Hugging Face uses for lstrip/rstrip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Length of the whitespace character starting at `pos`, or 0.
size_t white_space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const Utf8Step st = utf8_step(s.substr(pos));
  return st.valid && is_white_space(st.cp) ? st.len : 0;
}

// Length of the whitespace character ending at `pos`, or 0.
size_t white_space_before(std::string_view s, size_t pos) {
  for (size_t n = 1; n <= 3 && n <= pos; ++n) {
    if ((static_cast<unsigned char>(s[pos - n]) & 0xC0) == 0x80) continue;
    return white_space_at(s, pos - n) == n ? n : 0;
  }
  return 0;
}

bool is_word_char(std::string_view s, size_t pos) {
  if (pos >= s.size()) return false;
  const auto c = static_cast<unsigned char>(s[pos]);
  return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

bool is_word_char_before(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p > 0 && (static_cast<unsigned char>(s[p - 1]) & 0xC0) == 0x80) --p;
  return p > 0 && is_word_char(s, p - 1);
}

}  // namespace

void AddedTokenMatcher::add(AddedToken token) {
  if (token.content.empty()) return;
  const auto index = static_cast<uint32_t>(tokens_.size());
  auto& bucket = by_first_byte_[static_cast<unsigned char>(token.content[0])];
  tokens_.push_back(std::move(token));
  bucket.push_back(index);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
  size_t start = 0;  // start of the pending text fragment
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* hit = nullptr;
    for (uint32_t index : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = tokens_[index];
      if (t.special && !parse_special) continue;
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word && (is_word_char_before(text, i) || is_word_char(text, i + t.content.size()))) continue;
      hit = &t;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (size_t n = b > start ? white_space_before(text, b) : 0) b -= n;
    if (hit->rstrip)
      while (size_t n = white_space_at(text, e)) e += n;
    if (b > start) out.push_back({text.substr(start, b - start), -1});
    out.push_back({{}, hit->id});
    start = i = e;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
}

}  // namespace corolla::tok
