// Tokenizer from GGUF metadata (tokenizer.ggml.*), following llama.cpp's reading of those keys.
#include <cctype>
#include <initializer_list>
#include <stdexcept>

#include "model/config.hpp"
#include "model/tokenizer/sentencepiece.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/tokenizer/tokenizer_data.hpp"
#include "model/weights/gguf_file.hpp"

namespace corolla {

using namespace tok;

namespace {

// End-of-generation tokens llama.cpp recognises by their text when the metadata does not list them. Like llama.cpp,
// such a token is a control token whatever type the file gives it (a converter may have written Gemma's
// <end_of_turn> as user-defined): it ends generation and is matched in text only as special-token text.
constexpr const char* kEndOfGeneration[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|eom_id|>", "<EOT>",   "<|end_of_text|>"};

int32_t optional_id(const GgufFile& g, const std::string& key, const Vocab& vocab) {
  auto v = g.find_int(key);
  if (!v || *v < 0) return -1;
  if (*v >= static_cast<int64_t>(vocab.size()))
    throw std::runtime_error(g.path() + ": " + key + " = " + std::to_string(*v) + " is outside the vocabulary");
  return static_cast<int32_t>(*v);
}

// Whether `name`, in lower case, contains one of `parts` (llama.cpp's test of general.name).
bool name_contains_any(std::string name, std::initializer_list<const char*> parts) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* p : parts)
    if (name.find(p) != std::string::npos) return true;
  return false;
}

bool optional_bool(const GgufFile& g, const std::string& key, bool fallback) {
  return g.has(key) ? g.get_bool(key) : fallback;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  auto d = std::make_shared<TokenizerData>();
  d->source = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model");
  const auto& tokens = g.get_array("tokenizer.ggml.tokens").strings;
  if (tokens.empty()) throw std::runtime_error(g.path() + ": tokenizer.ggml.tokens is empty or not strings");
  if (tokens.size() > static_cast<size_t>(kMaxVocabSize))
    throw std::runtime_error(g.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens.size()) +
                             " tokens, above the limit of " + std::to_string(kMaxVocabSize));
  const GgufValue* types = g.has("tokenizer.ggml.token_type") ? &g.get_array("tokenizer.ggml.token_type") : nullptr;
  const GgufValue* scores = g.has("tokenizer.ggml.scores") ? &g.get_array("tokenizer.ggml.scores") : nullptr;
  if (types && types->ints.size() != tokens.size())
    throw std::runtime_error(g.path() + ": tokenizer.ggml.token_type has " + std::to_string(types->ints.size()) +
                             " entries for " + std::to_string(tokens.size()) + " tokens");
  if (scores && scores->floats.size() != tokens.size())
    throw std::runtime_error(g.path() + ": tokenizer.ggml.scores has " + std::to_string(scores->floats.size()) +
                             " entries for " + std::to_string(tokens.size()) + " tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    TokenKind kind = TokenKind::normal;
    if (types) {
      const int64_t t = types->ints[i];
      kind = t >= 1 && t <= 6 ? static_cast<TokenKind>(t) : TokenKind::normal;
    }
    d->vocab.set(static_cast<int32_t>(i), tokens[i], kind, scores ? static_cast<float>(scores->floats[i]) : 0.f);
  }

  std::vector<int32_t> end_of_generation;
  for (const char* text : kEndOfGeneration)
    if (auto id = d->vocab.find(text)) {
      d->vocab.set_kind(*id, TokenKind::control);
      end_of_generation.push_back(*id);
    }

  // Control, user-defined and unknown tokens are cut out of the text before anything else. llama.cpp gives those of
  // a Phi-3 vocabulary RSTRIP (the whitespace after them goes with them, as Phi-3's tokenizer.json says of its added
  // tokens) but <unk>, <s> and <|endoftext|>, keyed on the model's name: nothing in the vocabulary tells.
  const bool phi3 = name_contains_any(g.find_string("general.name").value_or(""), {"phi-3", "phi3"});
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const TokenKind k = d->vocab.kind(id);
    if (k != TokenKind::control && k != TokenKind::unknown && k != TokenKind::user_defined) continue;
    AddedToken t{id, tokens[i], k != TokenKind::user_defined};
    t.rstrip = phi3 && tokens[i] != "<unk>" && tokens[i] != "<s>" && tokens[i] != "<|endoftext|>";
    d->added.add(std::move(t));
  }

  bool add_bos = false;
  if (model == "gpt2") {
    d->byte_level = true;
    d->decode_mode = DecodeMode::byte_level;
    const std::string pre = g.find_string("tokenizer.ggml.pre").value_or("default");
    try {
      d->pre = PreTokenizer::for_gguf_name(pre, &d->ignore_merges);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(g.path() + ": tokenizer.ggml.pre: " + e.what());
    }
    add_bos = d->ignore_merges;  // llama.cpp: Llama-3-style vocabularies add BOS by default
    // Qwen2's tokenizer.json normalizes to NFC (llama.cpp skips this; it only matters for decomposed text).
    if (pre == "qwen2") d->normalize.push_back({NormalizeStep::unicode, "", "", NormalForm::nfc});
    const auto& merges = g.get_array("tokenizer.ggml.merges").strings;
    d->merges = MergeTable();
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const std::string& m = merges[rank];
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos)
        throw std::runtime_error(g.path() + ": tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + m +
                                 "' is not two pieces separated by a space");
      const std::string_view a = std::string_view(m).substr(0, sp), b = std::string_view(m).substr(sp + 1);
      const auto left = d->vocab.find(a), right = d->vocab.find(b);
      const auto merged = d->vocab.find(std::string(a) + std::string(b));
      // As Hugging Face: a merge of pieces the vocabulary lacks means a broken file, not one to load differently.
      if (!left || !right || !merged)
        throw std::runtime_error(g.path() + ": tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + m +
                                 "' names a piece that is not in the vocabulary");
      d->merges.insert(*left, *right, static_cast<int32_t>(rank), *merged);
    }
  } else if (model == "llama") {
    if (!scores) throw std::runtime_error(g.path() + ": SentencePiece vocabulary without tokenizer.ggml.scores");
    d->byte_level = false;
    d->decode_mode = DecodeMode::sentencepiece;
    const bool space_prefix = optional_bool(g, "tokenizer.ggml.add_space_prefix", true);
    if (space_prefix) d->normalize.push_back({NormalizeStep::prepend, " ", ""});
    d->normalize.push_back({NormalizeStep::replace, " ", std::string(kSpmSpace)});
    d->decode_strip_space = space_prefix;
    d->decode_byte_fallback = true;
    d->merges = spm_merges_from_scores(d->vocab);
    d->spm_word_split = spm_words_are_independent(d->vocab);
    d->bpe.byte_fallback = true;
    add_bos = true;
  } else {
    throw std::runtime_error(g.path() + ": tokenizer.ggml.model '" + model +
                             "' is not supported (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)");
  }

  d->bos = optional_id(g, "tokenizer.ggml.bos_token_id", d->vocab);
  d->eos = optional_id(g, "tokenizer.ggml.eos_token_id", d->vocab);
  d->bpe.unk_id = optional_id(g, "tokenizer.ggml.unknown_token_id", d->vocab);
  if (d->bpe.unk_id < 0 && model == "llama") d->bpe.unk_id = d->vocab.find_or("<unk>", -1);
  add_bos = optional_bool(g, "tokenizer.ggml.add_bos_token", add_bos);
  const bool add_eos = optional_bool(g, "tokenizer.ggml.add_eos_token", false);
  if (add_bos && d->bos >= 0) d->prefix.push_back(d->bos);
  if (add_eos && d->eos >= 0) d->suffix.push_back(d->eos);

  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (int32_t id = optional_id(g, key, d->vocab); id >= 0) d->eos_ids.push_back(id);
  d->eos_ids.insert(d->eos_ids.end(), end_of_generation.begin(), end_of_generation.end());
  d->chat_template = g.find_string("tokenizer.chat_template").value_or("");
  d->finish();
  return Tokenizer(std::move(d));
}

}  // namespace corolla
