// Vocabulary: id ↔ piece, with each token's kind (GGUF's tokenizer.ggml.token_type values) and score.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace corolla::tok {

enum class TokenKind : uint8_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  // Sets token `id` (growing the vocabulary with empty unused slots as needed). A piece that is already
  // present keeps its first id for lookups.
  void set(int32_t id, std::string piece, TokenKind kind = TokenKind::normal, float score = 0);
  void set_kind(int32_t id, TokenKind kind) { kinds_.at(id) = kind; }

  size_t size() const { return pieces_.size(); }
  bool contains(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < pieces_.size(); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  TokenKind kind(int32_t id) const { return kinds_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  std::optional<int32_t> find(std::string_view piece) const;
  int32_t find_or(std::string_view piece, int32_t fallback) const {
    auto id = find(piece);
    return id ? *id : fallback;
  }

  // The id of SentencePiece's byte token "<0xXX>" for `b`, or -1 (computed by index_bytes()).
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }
  void index_bytes();

 private:
  std::vector<std::string> pieces_;
  std::vector<TokenKind> kinds_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  std::vector<int32_t> byte_tokens_ = std::vector<int32_t>(256, -1);
};

}  // namespace corolla::tok
