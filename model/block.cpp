#include "model/block.hpp"

#include <algorithm>
#include <stdexcept>

#include "model/arch/step_cache.hpp"

namespace corolla {

void Block::forward(Tensor& hidden, std::span<const int32_t> positions, KVCache* cache, const BlockLora* lora) {
  if (hidden.rank() != 3)
    throw std::invalid_argument("block " + std::to_string(index()) + ": hidden states " + hidden.describe() +
                                " are not [batch, tokens, hidden]");
  const int64_t b = hidden.dim(0), t = hidden.dim(1);
  if (static_cast<int64_t>(positions.size()) != b * t)
    throw std::invalid_argument("block " + std::to_string(index()) + ": " + std::to_string(positions.size()) +
                                " positions for " + std::to_string(b * t) + " tokens");
  Tensor rows = hidden.reshaped({b * t, hidden.dim(2)});
  const BlockSegment one{.row = 0, .batch = b, .tokens = t, .positions = positions, .cache = cache, .lora = lora};
  forward_batch(rows, {&one, 1});
}

std::shared_ptr<KvPool> Block::make_pool(int64_t pages, int64_t page_tokens, DType dtype) const {
  return std::make_shared<KvPool>(backend(), pages, page_tokens, kv_heads(), kv_head_dim(), dtype);
}

KVCache Block::make_cache(int64_t batch, int64_t max_length) const {
  if (batch < 1 || max_length < 1)
    throw std::invalid_argument("block " + std::to_string(index()) + ": a KV cache of " + std::to_string(batch) +
                                " sequences of " + std::to_string(max_length) + " tokens");
  auto cache = KVCache::take(make_pool(batch, max_length), batch, max_length);
  if (!cache) throw std::logic_error("a pool made for a cache does not hold it");
  return std::move(*cache);
}

void check_segments(int64_t block, int64_t hidden_size, const Tensor& hidden, std::span<const BlockSegment> segments) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("block " + std::to_string(block) + ": " + what);
  };
  if (hidden.rank() != 2 || hidden.dim(1) != hidden_size)
    fail("hidden states " + hidden.describe() + " are not [rows, " + std::to_string(hidden_size) + "]");
  std::vector<std::pair<int64_t, int64_t>> spans;
  spans.reserve(segments.size());
  for (const BlockSegment& s : segments) {
    int64_t rows = 0, end = 0;
    if (s.batch < 1 || s.tokens < 1 || __builtin_mul_overflow(s.batch, s.tokens, &rows) || s.row < 0 ||
        __builtin_add_overflow(s.row, rows, &end) || end > hidden.dim(0))
      fail("a segment of " + std::to_string(s.batch) + " × " + std::to_string(s.tokens) + " tokens at row " +
           std::to_string(s.row) + " does not fit " + hidden.describe());
    if (static_cast<int64_t>(s.positions.size()) != rows)
      fail(std::to_string(s.positions.size()) + " positions for " + std::to_string(rows) + " tokens");
    spans.emplace_back(s.row, end);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) fail("segments overlap at row " + std::to_string(spans[i].first));
}

}  // namespace corolla
