// SentencePiece-style BPE (Llama-2, Mistral): spaces are written "▁" (U+2581), a "▁" is prefixed to the text
// (the dummy prefix), a word starts as one symbol per character, and characters outside the vocabulary fall
// back to byte tokens <0xXX>.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/vocab.hpp"

namespace corolla::tok {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁"

// The merge table of a vocabulary that has scores but no merge list (GGUF "llama" vocabularies), the way
// llama.cpp merges: two adjacent symbols merge when their concatenation is a token, the highest-scoring
// concatenation first (equal scores: leftmost first).
MergeTable spm_merges_from_scores(const Vocab& vocab);

// True when no normal token has a "▁" after another character: then no merge crosses the point just before a
// "▁" that follows a non-"▁" character, and text can be cut into words there (and words cached).
bool spm_words_are_independent(const Vocab& vocab);

// Cuts escaped text before each "▁" that follows a character other than "▁".
void spm_split_words(std::string_view escaped, std::vector<std::string_view>& words);

// Appends `text` with every space replaced by "▁".
void spm_escape_spaces(std::string_view text, std::string& out);

// One symbol per UTF-8 character of `word`, with its vocabulary id (or -1).
void spm_symbols(const Vocab& vocab, std::string_view word, std::vector<BpeSymbol>& symbols);

}  // namespace corolla::tok
