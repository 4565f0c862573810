// Tokenizer: text ↔ token ids, exactly as Hugging Face tokenizers (and llama.cpp on GGUF vocabularies) do it.
// Byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM) and SentencePiece-style BPE with byte fallback (Llama-2,
// Mistral), loaded from GGUF metadata or from a Hugging Face tokenizer.json (+ tokenizer_config.json).
// A Tokenizer is cheap to copy (shared, immutable) and safe to use from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace corolla {

class GgufFile;
namespace tok {
struct TokenizerData;
}

struct EncodeOptions {
  // Add what generation adds: BOS (and EOS) as the model's configuration says.
  bool add_special = true;
  // Recognise the text of special (control) tokens such as "<|im_end|>"; when false it is tokenized as plain
  // text. Added tokens that are not special are always recognised, as in Hugging Face and llama.cpp.
  bool parse_special = true;
};

class Tokenizer {
 public:
  static Tokenizer from_gguf(const GgufFile& gguf);
  // A directory holding tokenizer.json, and optionally tokenizer_config.json, chat_template.jinja and
  // generation_config.json.
  static Tokenizer from_hf_dir(const std::filesystem::path& dir);
  // A tokenizer.json's text alone (`source` names it in errors): what from_hf_dir reads first.
  static Tokenizer from_hf_json_text(std::string_view text, const std::string& source);
  // A GGUF file, a Hugging Face directory, or the tokenizer.json in one.
  static Tokenizer load(const std::filesystem::path& path);

  // Throws std::invalid_argument naming the byte offset when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  // Throws std::invalid_argument for an id outside the vocabulary. Ill-formed UTF-8 in the decoded bytes
  // becomes U+FFFD, as in Hugging Face.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The vocabulary entry of a token (e.g. "Ġthe", "▁the", "<0x0A>", "<|im_end|>").
  const std::string& piece(int32_t id) const;
  // True for control and unknown tokens (what decode(skip_special) leaves out).
  bool is_special(int32_t id) const;
  // The bytes a token contributes to decoded text (before the leading-space rule); empty for special tokens
  // when `skip_special`.
  std::string token_bytes(int32_t id, bool skip_special = false) const;
  // Whether decoding drops one leading space (SentencePiece's dummy prefix).
  bool strips_leading_space() const;

  int32_t bos_id() const;  // -1 when the model has none
  int32_t eos_id() const;
  // Every token that ends generation (EOS, end-of-turn, ...).
  const std::vector<int32_t>& eos_ids() const;
  bool is_eos(int32_t id) const;
  // Whether encode(add_special) adds BOS / EOS.
  bool adds_bos() const;
  bool adds_eos() const;
  size_t vocab_size() const;
  std::optional<int32_t> find_token(std::string_view piece) const;
  // The Jinja chat template the model declares (empty when none).
  const std::string& chat_template() const;

  explicit Tokenizer(std::shared_ptr<const tok::TokenizerData> data);

 private:
  void encode_fragment(std::string_view text, bool first, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;
  std::shared_ptr<const tok::TokenizerData> d_;
};

}  // namespace corolla
