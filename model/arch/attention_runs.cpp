#include "model/arch/attention_runs.hpp"

#include <algorithm>

namespace corolla {
namespace {

// Whether segment s may share a call with others: it attends over its session's own cache, not a ring, of as many
// sequences as it brings, and every position lies within what its own pages hold (a joined table is padded to the
// longest of its caches, so the backend's bound check would no longer catch one that does not).
bool joinable(const BlockSegment& s) {
  if (!s.cache || s.cache->batch() != s.batch) return false;
  const KvPages pages = s.cache->pages();
  if (pages.ring) return false;
  const int64_t slots = pages.slots();
  return std::all_of(s.positions.begin(), s.positions.end(), [&](int32_t p) { return p >= 0 && p < slots; });
}

bool same_pool(const KvPages& a, const KvPages& b) { return a.k.data() == b.k.data() && a.v.data() == b.v.data(); }

}  // namespace

AttentionRuns::AttentionRuns(Block& block, std::span<const BlockSegment> segments) {
  runs_.reserve(segments.size());
  for (size_t i = 0; i < segments.size();) {
    const BlockSegment& s = segments[i];
    size_t j = i + 1;
    const KvPages first = s.cache ? s.cache->pages() : KvPages{};
    if (joinable(s)) {
      for (int64_t end = s.row + s.rows(); j < segments.size(); ++j) {
        const BlockSegment& next = segments[j];
        if (next.row != end || next.tokens != s.tokens || !joinable(next) || !same_pool(first, next.cache->pages()))
          break;
        end += next.rows();
      }
    }
    if (j == i + 1) {
      StepCache& step = steps_.emplace_back(block, s.cache, s.batch, s.tokens, s.positions);
      runs_.push_back({.row = s.row,
                       .batch = s.batch,
                       .tokens = s.tokens,
                       .positions = s.positions,
                       .slots = step.slots(),
                       .pages = step.cache().pages(),
                       .at_positions = step.at_positions(s.positions)});
      ++i;
      continue;
    }
    // Segments i..j-1 as one: their sequences in order, each row of the table padded with its last page to the
    // longest (never read: every position lies within its own pages).
    const std::span<const BlockSegment> joined = segments.subspan(i, j - i);
    int64_t batch = 0, pages_per_sequence = 0;
    for (const BlockSegment& t : joined) {
      batch += t.batch;
      pages_per_sequence = std::max(pages_per_sequence, t.cache->pages().pages_per_sequence());
    }
    std::vector<int32_t>& table = joined_.emplace_back();
    std::vector<int32_t>& positions = joined_.emplace_back();
    table.reserve(static_cast<size_t>(batch * pages_per_sequence));
    positions.reserve(static_cast<size_t>(batch * s.tokens));
    for (const BlockSegment& t : joined) {
      const KvPages own = t.cache->pages();
      const auto per = static_cast<size_t>(own.pages_per_sequence());
      for (int64_t b = 0; b < t.batch; ++b) {
        const std::span<const int32_t> row = own.table.subspan(static_cast<size_t>(b) * per, per);
        table.insert(table.end(), row.begin(), row.end());
        table.insert(table.end(), static_cast<size_t>(pages_per_sequence) - per, row.back());
      }
      positions.insert(positions.end(), t.positions.begin(), t.positions.end());
    }
    runs_.push_back({.row = s.row,
                     .batch = batch,
                     .tokens = s.tokens,
                     .positions = positions,
                     .slots = positions,
                     .pages = KvPages{first.k, first.v, table, batch, false},
                     .at_positions = true});
    i = j;
  }
}

}  // namespace corolla
