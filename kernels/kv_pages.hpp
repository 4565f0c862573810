// A KV cache in pages: what a block's KV writes fill and its attention reads. Keys and values live in pools
// k, v [P, page_tokens, Hkv, Dh]; each sequence owns a list of pool pages, and its slot s lives in page
// table[b · pages_per_sequence + s / page_tokens] at row s % page_tokens. A session's cache is its pages of its
// block's pool (model/kv_pool.hpp), so sessions of any length share one budget without fragmenting it; a
// contiguous cache [B, S, Hkv, Dh] is the same thing with one page of S tokens per sequence (ContiguousKv).
//
// A ring cache (a sliding-window layer's: `ring`) holds only the last slots() positions of each sequence: position
// s lives where s mod slots() would, so a session of any length keeps its window in a few pages. A query may read
// only positions the ring still holds (kv_reads_problem in kernels/backend.hpp).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

struct KvPages {
  Tensor k, v;                     // the pools [P, page_tokens, Hkv, Dh], f32 or f16 (both alike)
  std::span<const int32_t> table;  // [batch, pages_per_sequence] page numbers
  int64_t batch = 0;
  bool ring = false;  // positions wrap around the slots: the cache keeps the latest of them

  int64_t page_tokens() const { return k.rank() == 4 ? k.dim(1) : 0; }
  int64_t pages_per_sequence() const { return batch > 0 ? static_cast<int64_t>(table.size()) / batch : 0; }
  // Slots per sequence: the longest history it can hold.
  int64_t slots() const { return pages_per_sequence() * page_tokens(); }
  // The pool row (page · page_tokens + offset) of sequence b's position s.
  int64_t row(int64_t b, int64_t s) const {
    const int64_t page = page_tokens(), pps = pages_per_sequence();
    return static_cast<int64_t>(table[static_cast<size_t>(b * pps + (s / page) % pps)]) * page + s % page;
  }
  // How many positions from s on (at most n) lie in consecutive pool rows: one contiguous run a kernel can read as
  // one matrix. Consecutive pages of a sequence are usually consecutive in the pool (a pool hands out its lowest
  // free pages), so a whole history is typically one run (a ring's, one run up to where it wraps).
  int64_t run(int64_t b, int64_t s, int64_t n) const {
    const int64_t page = page_tokens(), pps = pages_per_sequence();
    int64_t p = (s / page) % pps, len = std::min(n, page - s % page);
    while (len < n && p + 1 < pps &&
           table[static_cast<size_t>(b * pps + p + 1)] == table[static_cast<size_t>(b * pps + p)] + 1) {
      ++p;
      len = std::min(n, len + page);
    }
    return len;
  }
  // Sequence b's pages alone (a view of one row of the table).
  KvPages sequence(int64_t b) const {
    const size_t pps = static_cast<size_t>(pages_per_sequence());
    return {k, v, table.subspan(static_cast<size_t>(b) * pps, pps), 1, ring};
  }
};

// Empty when `pages` is well formed for keys and values of `kv_heads` heads of `head_dim` (f32 or f16 pools of equal
// dtype and shape [P, page_tokens, kv_heads, head_dim], a whole number of table entries per sequence, every entry a
// page of the pool); otherwise what is wrong. The one check every backend applies (and whether it reads the pools'
// dtype: Backend::supports_kv).
inline std::string kv_pages_problem(const KvPages& pages, int64_t kv_heads, int64_t head_dim) {
  const Tensor& k = pages.k;
  if ((k.dtype() != DType::f32 && k.dtype() != DType::f16) || pages.v.dtype() != k.dtype() || k.rank() != 4 ||
      pages.v.shape() != k.shape())
    return "KV pools " + k.describe() + " and " + pages.v.describe() +
           " are not two f32 or two f16 [pages, tokens, heads, dim]";
  if (k.dim(2) != kv_heads || k.dim(3) != head_dim)
    return "KV pool " + k.describe() + " does not hold " + std::to_string(kv_heads) + " heads of " +
           std::to_string(head_dim);
  if (k.dim(0) < 1 || k.dim(1) < 1) return "KV pool " + k.describe() + " is empty";
  if (pages.batch < 1 || pages.table.empty() || pages.table.size() % static_cast<size_t>(pages.batch) != 0)
    return "a page table of " + std::to_string(pages.table.size()) + " entries for " + std::to_string(pages.batch) +
           " sequences";
  const auto per_sequence = static_cast<int64_t>(pages.table.size() / static_cast<size_t>(pages.batch));
  if (k.dim(0) > INT32_MAX || k.dim(1) > INT32_MAX || per_sequence > INT32_MAX || per_sequence * k.dim(1) > INT32_MAX)
    return "a cache of more than 2^31 slots or pages (positions and page numbers are 32-bit)";
  for (int32_t p : pages.table)
    if (p < 0 || p >= k.dim(0))
      return "page " + std::to_string(p) + " is outside the pool of " + std::to_string(k.dim(0)) + " pages";
  return {};
}

// A contiguous cache k, v [B, S, Hkv, Dh] seen as pages: sequence b is page b, of S tokens. (The stateless
// forward's scratch cache, a training recompute's keys and values, tests.) Holds the table the view points to.
class ContiguousKv {
 public:
  ContiguousKv(Tensor k, Tensor v) : table_(static_cast<size_t>(k.rank() == 4 ? k.dim(0) : 0)) {
    for (size_t i = 0; i < table_.size(); ++i) table_[i] = static_cast<int32_t>(i);
    pages_ = {std::move(k), std::move(v), table_, static_cast<int64_t>(table_.size()), false};
  }
  ContiguousKv(const ContiguousKv&) = delete;
  ContiguousKv& operator=(const ContiguousKv&) = delete;
  KvPages& pages() { return pages_; }

 private:
  std::vector<int32_t> table_;
  KvPages pages_;
};

}  // namespace corolla
