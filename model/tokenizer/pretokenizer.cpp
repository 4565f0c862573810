#include "model/tokenizer/pretokenizer.hpp"

#include <stdexcept>

namespace corolla::tok {

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior, bool invert, bool literal) {
  rules_.push_back({std::make_shared<const Regex>(pattern, literal), behavior, invert});
}

void PreTokenizer::apply(const Rule& rule, std::string_view piece, std::vector<std::string_view>& out) const {
  thread_local std::vector<std::pair<size_t, size_t>> found;
  found.clear();
  rule.regex->find_all(piece, found);
  // Cut the piece into alternating (gap, match) intervals, then emit them according to the behaviour.
  struct Interval {
    size_t b, e;
    bool delimiter;
  };
  thread_local std::vector<Interval> parts;
  parts.clear();
  size_t pos = 0;
  for (auto [b, e] : found) {
    if (b > pos) parts.push_back({pos, b, rule.invert});
    parts.push_back({b, e, !rule.invert});
    pos = e;
  }
  if (pos < piece.size()) parts.push_back({pos, piece.size(), rule.invert});

  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  switch (rule.behavior) {
    case SplitBehavior::isolated:
      for (const auto& p : parts) emit(p.b, p.e);
      break;
    case SplitBehavior::removed:
      for (const auto& p : parts)
        if (!p.delimiter) emit(p.b, p.e);
      break;
    case SplitBehavior::merged_with_previous: {
      size_t start = 0;
      for (const auto& p : parts)
        if (p.delimiter) emit(start, p.e), start = p.e;
      emit(start, piece.size());
      break;
    }
    case SplitBehavior::merged_with_next: {
      size_t start = 0;
      for (const auto& p : parts)
        if (p.delimiter) emit(start, p.b), start = p.b;
      emit(start, piece.size());
      break;
    }
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  if (rules_.empty()) {
    words.push_back(text);
    return;
  }
  std::vector<std::string_view> current{text}, next;
  for (const Rule& rule : rules_) {
    next.clear();
    for (std::string_view piece : current) apply(rule, piece, next);
    current.swap(next);
  }
  words.insert(words.end(), current.begin(), current.end());
}

// llama.cpp's rules for each `tokenizer.ggml.pre` name (src/llama-vocab.cpp), applied one after the other, each to
// every piece the previous one left (matches and the text between them both become pieces). Where they differ from
// the model's own tokenizer.json, a GGUF file is read as llama.cpp reads it (the GGUF contract), noted per name.
// llama.cpp lists GPT-2's rule without its last alternative (\s+); that changes nothing, since text it leaves
// unmatched becomes a piece of its own, which is what \s+ would have matched.
PreTokenizer PreTokenizer::for_gguf_name(const std::string& name, bool* ignore_merges) {
  PreTokenizer p;
  bool ignore = false;
  auto is = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (name == n) return true;
    return false;
  };
  if (is({"default"})) {
    // llama.cpp's default (also what it uses when a file names none): punctuation runs, GPT-2's words, digit
    // runs, digit triples. Not GPT-2's rule alone.
    p.add_split(R"([\p{P}$+<=>^~|]+)", SplitBehavior::isolated);
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
    p.add_split(patterns::digit_runs, SplitBehavior::isolated);
    p.add_split("[0-9][0-9][0-9]", SplitBehavior::isolated);
  } else if (is({"gpt-2", "phi-2", "mpt", "olmo", "jais", "roberta-bpe"})) {
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
  } else if (is({"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
    p.add_split(patterns::llama3, SplitBehavior::isolated);
    ignore = true;
  } else if (is({"falcon"})) {
    // Punctuation runs, GPT-2's words, digit triples, all on the text. Falcon's tokenizer.json splits digit runs
    // and triples after its ByteLevel step, in the byte alphabet: " 12" is one word here and two there, and a
    // UTF-8 byte that reads as a digit there ('²' for 0xB2, inside Cyrillic 'в') cuts a character there only.
    p.add_split(patterns::punctuation_runs, SplitBehavior::isolated);
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
    p.add_split("[0-9][0-9][0-9]", SplitBehavior::isolated);
  } else if (is({"qwen2", "deepseek-r1-qwen"})) {
    p.add_split(patterns::qwen2, SplitBehavior::isolated);
  } else if (is({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"})) {
    p.add_split(patterns::single_digit, SplitBehavior::isolated);
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
  } else if (is({"bloom", "poro-chat", "gpt3-finnish"})) {
    p.add_split(patterns::bloom, SplitBehavior::isolated);
  } else if (is({"deepseek-llm"})) {
    // DeepSeek-LLM's tokenizer.json ends with Digits(individual_digits); llama.cpp keeps digit runs together. The
    // same ids wherever the vocabulary has no token of two digits, as one trained with single digits has not.
    p.add_split("[\r\n]", SplitBehavior::isolated);
    p.add_split(patterns::deepseek_llm_letters, SplitBehavior::isolated);
    p.add_split(patterns::deepseek_llm_marks, SplitBehavior::isolated);
    p.add_split(R"(\s+$)", SplitBehavior::isolated);
    p.add_split(patterns::deepseek_cjk, SplitBehavior::isolated);
    p.add_split(patterns::digit_runs, SplitBehavior::isolated);
  } else if (is({"deepseek-coder"})) {
    p.add_split("[\r\n]", SplitBehavior::isolated);
    p.add_split(R"(\s?\p{L}+)", SplitBehavior::isolated);
    p.add_split(R"(\s?\p{P}+)", SplitBehavior::isolated);
    p.add_split(patterns::deepseek_cjk, SplitBehavior::isolated);
    p.add_split(patterns::single_digit, SplitBehavior::isolated);
  } else if (is({"deepseek-v3"})) {
    p.add_split(patterns::digit_triples, SplitBehavior::isolated);
    p.add_split(patterns::deepseek_v3_cjk, SplitBehavior::isolated);
    p.add_split(patterns::deepseek_v3_words, SplitBehavior::isolated);
  } else {
    throw std::invalid_argument("unknown pre-tokenizer '" + name +
                                "' (known: default, gpt-2, llama-bpe/llama3, qwen2, smollm, falcon, bloom, "
                                "deepseek-llm, deepseek-coder, deepseek-v3 and aliases)");
  }
  if (ignore_merges) *ignore_merges = ignore;
  return p;
}

}  // namespace corolla::tok
