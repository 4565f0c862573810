#include "model/tokenizer/sentencepiece.hpp"

#include <algorithm>

#include "model/tokenizer/unicode.hpp"

namespace corolla::tok {

MergeTable spm_merges_from_scores(const Vocab& vocab) {
  // Rank = position of the token's score in descending order; equal scores share a rank.
  std::vector<float> scores;
  for (size_t id = 0; id < vocab.size(); ++id)
    if (vocab.kind(static_cast<int32_t>(id)) == TokenKind::normal)
      scores.push_back(vocab.score(static_cast<int32_t>(id)));
  std::sort(scores.begin(), scores.end(), std::greater<>());
  scores.erase(std::unique(scores.begin(), scores.end()), scores.end());

  MergeTable table;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (vocab.kind(id) != TokenKind::normal) continue;
    const std::string& piece = vocab.piece(id);
    const auto rank = static_cast<int32_t>(
        std::lower_bound(scores.begin(), scores.end(), vocab.score(id), std::greater<>()) - scores.begin());
    // Every split of the piece at a character boundary into two tokens is a merge giving this piece.
    for (size_t k = utf8_len(static_cast<unsigned char>(piece[0])); k < piece.size();
         k += utf8_len(static_cast<unsigned char>(piece[k]))) {
      const auto left = vocab.find(std::string_view(piece).substr(0, k));
      if (!left) continue;
      const auto right = vocab.find(std::string_view(piece).substr(k));
      if (right) table.insert(*left, *right, rank, id);
    }
  }
  return table;
}

bool spm_words_are_independent(const Vocab& vocab) {
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (vocab.kind(id) != TokenKind::normal) continue;
    std::string_view p = vocab.piece(id);
    while (p.substr(0, kSpmSpace.size()) == kSpmSpace) p.remove_prefix(kSpmSpace.size());
    if (p.find(kSpmSpace) != std::string_view::npos) return false;
  }
  return true;
}

void spm_split_words(std::string_view s, std::vector<std::string_view>& words) {
  size_t start = 0;
  bool prev_is_space = true;  // no cut at the very start
  for (size_t i = 0; i < s.size();) {
    const bool is_space = s.compare(i, kSpmSpace.size(), kSpmSpace) == 0;
    if (is_space && !prev_is_space) {
      words.push_back(s.substr(start, i - start));
      start = i;
    }
    prev_is_space = is_space;
    i += is_space ? kSpmSpace.size() : utf8_len(static_cast<unsigned char>(s[i]));
  }
  if (start < s.size()) words.push_back(s.substr(start));
}

void spm_escape_spaces(std::string_view text, std::string& out) {
  for (char c : text) {
    if (c == ' ')
      out += kSpmSpace;
    else
      out += c;
  }
}

void spm_symbols(const Vocab& vocab, std::string_view word, std::vector<BpeSymbol>& symbols) {
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    symbols.push_back({vocab.find_or(word.substr(i, n), -1), static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
    i += n;
  }
}

}  // namespace corolla::tok
