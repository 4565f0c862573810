#include "model/recorded_steps.hpp"

#include <algorithm>

namespace corolla {

void RecordedSteps::forward(Block& block, Tensor& hidden, std::span<const int32_t> positions, KVCache* cache,
                            const BlockLora* lora) {
  // (A cache whose table beam search reorders is not recorded: a recording holds the table it was made with.)
  const bool decode = cache && cache->version() == 0 && hidden.rank() == 3 && hidden.dim(1) == 1 && block.recordable();
  if (!decode) return block.forward(hidden, positions, cache, lora);
  const Key key{&block, cache->id(), hidden.shape(), lora};
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries_.end()) {
    // The block's own checks run at recording (a replay checks only the shape and the positions' range).
    Entry e{key, block.backend().record(hidden, positions, [&](Tensor& io, std::span<const int32_t> p) {
              block.forward(io, p, cache, lora);
            })};
    entries_.push_back(std::move(e));
    it = entries_.end() - 1;
  }
  if (!it->recording) return block.forward(hidden, positions, cache, lora);
  it->recording->replay(hidden, positions);
}

void RecordedSteps::forget(const KVCache& cache) {
  std::erase_if(entries_, [&](const Entry& e) { return e.key.cache == cache.id(); });
}

}  // namespace corolla
