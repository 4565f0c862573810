#include "model/tokenizer/vocab.hpp"

#include <cstdio>
#include <stdexcept>

#include "model/config.hpp"

namespace corolla::tok {

void Vocab::set(int32_t id, std::string piece, TokenKind kind, float score) {
  if (id < 0 || id >= kMaxVocabSize)
    throw std::invalid_argument("token id " + std::to_string(id) + " is outside 0.." +
                                std::to_string(kMaxVocabSize - 1));
  if (static_cast<size_t>(id) >= pieces_.size()) {
    pieces_.resize(id + 1);
    kinds_.resize(id + 1, TokenKind::unused);
    scores_.resize(id + 1, 0.f);
  }
  ids_.try_emplace(piece, id);
  pieces_[id] = std::move(piece);
  kinds_[id] = kind;
  scores_[id] = score;
}

std::optional<int32_t> Vocab::find(std::string_view piece) const {
  auto it = ids_.find(piece);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void Vocab::index_bytes() {
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_tokens_[b] = find_or(name, -1);
  }
}

}  // namespace corolla::tok
