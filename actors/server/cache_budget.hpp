// The KV-cache budget of a server, in token·blocks: a session of `batch` sequences of up to `max_length` tokens
// over n blocks holds batch · max_length · n of it from open to close. Reserving up front means a step never
// fails for lack of memory half-way through a generation.
#pragma once

#include <cstdint>
#include <string>

namespace corolla {

class CacheBudget {
 public:
  CacheBudget(int64_t tokens_per_block, int64_t blocks) : capacity_(tokens_per_block * blocks), blocks_(blocks) {}

  bool try_reserve(int64_t amount) {
    if (amount <= 0 || amount > capacity_ - used_) return false;
    used_ += amount;
    return true;
  }
  void release(int64_t amount) { used_ = amount > used_ ? 0 : used_ - amount; }
  int64_t left() const { return capacity_ - used_; }
  // What is left, expressed as tokens in every hosted block (what ServerInfo announces).
  int64_t tokens_left_per_block() const { return blocks_ ? left() / blocks_ : 0; }
  int64_t capacity() const { return capacity_; }

 private:
  int64_t capacity_;
  int64_t blocks_;
  int64_t used_ = 0;
};

}  // namespace corolla
