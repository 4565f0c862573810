// Pre-tokenizer: cuts a text segment into words before BPE, by a sequence of regex split rules (each rule
// applies to every piece the previous rules produced), as Hugging Face's Split/Digits/ByteLevel(use_regex)
// and llama.cpp's per-model regex lists do.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/regex.hpp"

namespace corolla::tok {

// What happens to the matches of a split rule (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next };

// The split rules of the model families Corolla knows, as Hugging Face and llama.cpp define them.
namespace patterns {
inline constexpr const char* gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's rule, with the case-insensitive group spelled out as llama.cpp does.
inline constexpr const char* llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama-3, but every digit is a word of its own.
inline constexpr const char* qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* single_digit = R"(\p{N})";
// Hugging Face's Punctuation pre-tokenizer: Unicode punctuation (\p{P}) and the ASCII symbols Rust counts as
// punctuation too.
inline constexpr const char* punctuation = R"([\p{P}$+<=>^`|~])";
inline constexpr const char* punctuation_runs = R"([\p{P}$+<=>^`|~]+)";
inline constexpr const char* digit_runs = R"(\p{N}+)";
}  // namespace patterns

class PreTokenizer {
 public:
  // Adds a rule. `invert` swaps the roles of matches and the text between them.
  void add_split(const std::string& pattern, SplitBehavior behavior, bool invert = false, bool literal = false);
  bool empty() const { return rules_.empty(); }

  // Appends the words of `text` (views into it) to `words`. With no rules, the text is one word.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  // The rules llama.cpp gives a GGUF `tokenizer.ggml.pre` name; throws std::invalid_argument for an unknown one.
  // `ignore_merges` is set for the families whose BPE first looks the whole word up (Llama-3).
  static PreTokenizer for_gguf_name(const std::string& name, bool* ignore_merges = nullptr);

 private:
  struct Rule {
    std::shared_ptr<const Regex> regex;
    SplitBehavior behavior;
    bool invert;
  };
  void apply(const Rule& rule, std::string_view piece, std::vector<std::string_view>& out) const;
  std::vector<Rule> rules_;
};

}  // namespace corolla::tok
