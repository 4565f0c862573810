// The full description of a tokenizer, as the loaders (GGUF metadata, tokenizer.json) fill it in and
// Tokenizer runs it. Internal to model/tokenizer/.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/added_tokens.hpp"
#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/unicode.hpp"
#include "model/tokenizer/vocab.hpp"

namespace corolla::tok {

enum class Prepend { never, first, always };

// One normalization step applied to each text fragment (Hugging Face's Prepend, Replace and NF* normalizers).
struct NormalizeStep {
  enum Kind { prepend, replace, unicode } kind;
  std::string a, b;  // prepend: a; replace: a → b
  NormalForm form = NormalForm::nfc;
};

// Metaspace pre-tokenizer: spaces become `replacement`, which is prefixed per `prepend`; with `split`, the text
// is cut before each replacement character.
struct Metaspace {
  bool enabled = false;
  std::string replacement = "\xE2\x96\x81";
  Prepend prepend = Prepend::always;
  bool split = false;
};

enum class DecodeMode { byte_level, sentencepiece };

// word → ids, shared by the threads that use one tokenizer.
class WordCache {
 public:
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void store(std::string_view word, const int32_t* ids, size_t n) const;

 private:
  static constexpr size_t kMaxEntries = 1 << 17;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map_;
};

struct TokenizerData {
  std::string source;  // file path, for messages
  Vocab vocab;
  AddedTokenMatcher added;

  // Text fragment → words.
  std::vector<NormalizeStep> normalize;
  Metaspace metaspace;
  bool byte_level_prefix_space = false;  // ByteLevel(add_prefix_space)
  PreTokenizer pre;
  // Rules that follow ByteLevel in the pre-tokenizer sequence (Falcon's Digits and Split): Hugging Face applies
  // them to each word written in GPT-2's byte alphabet, where a UTF-8 continuation byte such as 0xB2 reads as the
  // digit '²', so they can cut inside a character.
  PreTokenizer after_byte_level;
  bool spm_word_split = false;  // cut escaped text before "▁" (safe for this vocabulary: words are independent)

  // Word → ids.
  bool byte_level = false;           // the symbols of a word are its bytes in GPT-2's alphabet
  std::vector<int32_t> byte_symbol;  // byte → id of its alphabet character (byte-level)
  MergeTable merges;
  BpeOptions bpe;
  bool ignore_merges = false;  // a word that is a whole token is that token
  WordCache cache;

  // Special tokens added around the text by encode(add_special = true).
  std::vector<int32_t> prefix, suffix;
  int32_t bos = -1, eos = -1;
  std::vector<int32_t> eos_ids;  // every end-of-generation token

  // ids → text.
  DecodeMode decode_mode = DecodeMode::byte_level;
  bool decode_strip_space = false;    // drop one leading space from the text (SentencePiece's dummy prefix)
  bool decode_byte_fallback = false;  // SentencePiece mode: <0xXX> pieces stand for their byte

  std::string chat_template;

  // Fills byte_symbol and the vocabulary's byte-token index; call once the vocabulary is complete.
  void finish();
};

}  // namespace corolla::tok
