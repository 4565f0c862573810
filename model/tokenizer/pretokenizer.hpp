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
inline constexpr const char* gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
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
// BLOOM's word rule: a run of anything but whitespace, '(', '|', ')' and a few sentence marks, with its leading
// space (written without the nested class of its tokenizer.json, which means the same set).
inline constexpr const char* bloom = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";
// DeepSeek's rules (their tokenizer.json Splits, in the order the Sequence applies them).
// DeepSeek-LLM: a run of the cased letters of the alphabetic scripts (Latin, Greek, Cyrillic, Armenian, Georgian,
// Cherokee, Glagolitic, Coptic, Deseret, ...), with one leading whitespace character.
inline constexpr const char* deepseek_llm_letters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
// ... a run of ASCII characters from '!' to '/' and ':' to '~' (which holds the ASCII letters too, so it cuts the
// pieces of the letter rule again: "Größe" ends as "Gr", "öß", "e"), full-width ones, quotation marks or CJK full
// stops, with one leading whitespace character.
inline constexpr const char* deepseek_llm_marks =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
// DeepSeek-LLM and -Coder: a run of CJK ideographs, Samaritan to CJK blocks, or Hangul.
inline constexpr const char* deepseek_cjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek-V3: digits in groups of up to three, runs of CJK ideographs and kana, then words: a letter run after one
// ASCII mark, or letters and marks after one character that is not a letter, mark or symbol, punctuation and
// symbol runs with the line breaks that follow, line breaks, spaces.
inline constexpr const char* digit_triples = R"(\p{N}{1,3})";
inline constexpr const char* deepseek_v3_cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
inline constexpr const char* deepseek_v3_words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|)"
    R"( ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
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
