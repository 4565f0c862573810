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
  struct Interval { size_t b, e; bool delimiter; };
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

PreTokenizer PreTokenizer::for_gguf_name(const std::string& name, bool* ignore_merges) {
  PreTokenizer p;
  bool ignore = false;
  if (name == "default" || name == "gpt-2" || name == "gpt2" || name == "phi-2" || name == "mpt" ||
      name == "olmo" || name == "jais" || name == "roberta-bpe") {
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
  } else if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3") {
    p.add_split(patterns::llama3, SplitBehavior::isolated);
    ignore = true;
  } else if (name == "falcon") {  // llama.cpp's rules for Falcon's (punctuation runs, GPT-2's words, digit triples)
    p.add_split(patterns::punctuation_runs, SplitBehavior::isolated);
    p.add_split(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))", SplitBehavior::isolated);
    p.add_split("[0-9][0-9][0-9]", SplitBehavior::isolated);
  } else if (name == "qwen2" || name == "deepseek-r1-qwen") {
    p.add_split(patterns::qwen2, SplitBehavior::isolated);
  } else if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
             name == "codeshell" || name == "exaone" || name == "minerva") {
    p.add_split(patterns::single_digit, SplitBehavior::isolated);
    p.add_split(patterns::gpt2, SplitBehavior::isolated);
  } else {
    throw std::invalid_argument("unknown pre-tokenizer '" + name +
                                "' (known: default, gpt-2, llama-bpe/llama3, qwen2, smollm, falcon and aliases)");
  }
  if (ignore_merges) *ignore_merges = ignore;
  return p;
}

}  // namespace corolla::tok
