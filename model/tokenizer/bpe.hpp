// Byte-pair encoding: the merge table and the merge loop shared by byte-level BPE (GPT-2, Llama-3, Qwen2,
// SmolLM) and SentencePiece-style BPE (Llama-2, Mistral). A word starts as a list of symbols (one per byte or
// per character); the adjacent pair with the lowest rank merges first, the leftmost one on ties, until no
// pair in the table remains. The loop keeps the symbols in a linked list and candidate pairs in a binary heap.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/vocab.hpp"

namespace corolla::tok {

struct Merge {
  int32_t rank;
  int32_t result;
};

// (left id, right id) → (rank, merged id), open addressing.
class MergeTable {
 public:
  // Keeps the first entry for a pair.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t result);
  const Merge* find(int32_t left, int32_t right) const {
    if (count_ == 0 || left < 0 || right < 0) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  size_t count_ = 0, mask_ = 0;
  int shift_ = 64;
};

// One initial symbol of a word: its vocabulary id (-1 when the piece is not in the vocabulary) and the bytes
// of the word it covers (used for byte fallback).
struct BpeSymbol {
  int32_t id;
  uint32_t begin, len;
};

struct BpeOptions {
  bool byte_fallback = false;  // pieces outside the vocabulary become <0xXX> byte tokens
  int32_t unk_id = -1;         // otherwise this token (or nothing when -1)
  bool fuse_unk = false;       // consecutive unknown pieces give one unk token
};

// Merges `symbols` (the word `text`) and appends the resulting ids to `out`.
void bpe_merge(const MergeTable& merges, const Vocab& vocab, const BpeOptions& options, std::string_view text,
               const std::vector<BpeSymbol>& symbols, std::vector<int32_t>& out);

}  // namespace corolla::tok
