// Decode steps through the backend's recordings (Backend::record: CUDA graphs). A single-token step of a block
// issues ~15 operations; replayed as one recording it costs one launch. One recording per block, session cache,
// batch shape and adapter, made at the first such step and replayed at the next ones; prefill (several tokens per
// sequence, a different length each time) and blocks that cannot be recorded run as they are.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "model/block.hpp"

namespace corolla {

class RecordedSteps {
 public:
  // block.forward(hidden, positions, cache, lora), replayed where it can be.
  void forward(Block& block, Tensor& hidden, std::span<const int32_t> positions, KVCache* cache, const BlockLora* lora);
  // Drops the recordings made on `cache` (its session closed or the cache was replaced): they write into it.
  void forget(const KVCache& cache);
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }

 private:
  struct Key {
    const Block* block;
    uint64_t cache;  // KVCache::id(): the recording holds the cache's pool and page table
    Shape shape;
    const BlockLora* lora;
    bool operator==(const Key&) const = default;
  };
  struct Entry {
    Key key;
    std::unique_ptr<Recording> recording;  // nullptr: the backend does not record this step
  };
  std::vector<Entry> entries_;
};

}  // namespace corolla
