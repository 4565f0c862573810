// A transformer block: the unit a server hosts. One forward over hidden states [batch, tokens, hidden] with
// explicit positions and an optional KV cache. Architectures live in model/arch/, one file each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/kv_pool.hpp"
#include "model/lora.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

// One session's share of a batched forward (several sessions' steps through a block at once, so its weights are
// read once for all of them): rows [row, row + batch·tokens) of the hidden states, `batch` sequences of `tokens`
// tokens each, token r at positions[r], with the session's `cache` (nullptr: the stateless forward, each sequence
// attending to its own tokens) and its LoRA adapter's pairs for this block (nullptr: none).
struct BlockSegment {
  int64_t row = 0, batch = 1, tokens = 1;
  std::span<const int32_t> positions;
  KVCache* cache = nullptr;
  const BlockLora* lora = nullptr;
  int64_t rows() const { return batch * tokens; }
};

class Block {
 public:
  virtual ~Block() = default;
  virtual int64_t index() const = 0;
  // The backend the block computes on (its inputs and outputs live there).
  virtual Backend& backend() const = 0;
  // Transforms hidden [B, T, D] (f32, on the backend's device) in place. Token b·T + t sits at positions[b·T + t].
  // With a cache, its K/V are stored at slot = position and it attends to slots 0..position (the history must
  // be contiguous). Without one, each sequence attends causally to its own T tokens, whatever their positions.
  // With `lora`, the adapter's pairs add to the projections they target (model/lora.hpp).
  // (One segment of forward_batch.)
  void forward(Tensor& hidden, std::span<const int32_t> positions, KVCache* cache, const BlockLora* lora = nullptr);
  // Transforms hidden [M, D] in place, each segment as forward would transform it alone: the per-token work (norms,
  // projections, MLP) runs once over all M rows, attention per segment over its own cache, and each segment's
  // adapter (if any) adds its low-rank part to its own rows, so sessions with different adapters share a batch.
  // Segments must not overlap; rows outside every segment are computed without attention, adapter or cache write
  // (their values mean nothing).
  virtual void forward_batch(Tensor& hidden, std::span<const BlockSegment> segments) = 0;
  // The gradient of the stateless forward (no cache) with respect to its input. hidden_in [B, T, D] is what that
  // forward received, grad [B, T, D] the gradient of its output; grad is replaced by the gradient of hidden_in.
  // The forward is recomputed here (servers keep nothing between requests); the weights stay frozen.
  virtual void backward(const Tensor& hidden_in, std::span<const int32_t> positions, Tensor& grad,
                        const BlockLora* lora = nullptr) = 0;
  // The heads and head size of the keys and values this block caches.
  virtual int64_t kv_heads() const = 0;
  virtual int64_t kv_head_dim() const = 0;
  // How far back its attention sees (0: the whole history): a session's cache at this block need hold only that
  // many positions (KVCache::take makes it a ring).
  virtual int64_t kv_window() const { return 0; }
  // A pool of `pages` pages of `page_tokens` tokens for the caches of this block's sessions (KVCache::take), its keys
  // and values held in `dtype` (f32; f16 where the backend reads it: half the memory, values rounded to 11 bits).
  std::shared_ptr<KvPool> make_pool(int64_t pages, int64_t page_tokens = kKvPageTokens, DType dtype = DType::f32) const;
  // A cache with a pool of its own, exactly `batch` sequences of `max_length` tokens, each one page (a local
  // model's cache, the stateless forward's scratch, measurements).
  KVCache make_cache(int64_t batch, int64_t max_length) const;
  // Whether one Backend::record of a forward with a cache serves any positions: the forward gives the backend no
  // host array computed from the positions but the positions themselves, and needs no result on the host
  // (LocalModel records its single-token steps).
  virtual bool recordable() const { return false; }
  // Bytes of weights held (in the serving dtype).
  virtual int64_t weight_bytes() const = 0;
  // The weights as loaded (serving dtype, Hugging Face names, on the backend's device): what a weights cache
  // stores so that a restart can skip conversion (load the block again from a TensorMapSource of them).
  virtual std::vector<std::pair<std::string, Tensor>> named_weights() const = 0;
};

struct BlockLoadOptions {
  // Serving dtype of the weight matrices; nullopt keeps the stored dtype. Norms and biases are always f32.
  std::optional<DType> dtype;
};

// Loads block `index` of the model in `source` onto `backend` (which must outlive the block). Throws naming the
// file and tensor when a tensor is missing or has the wrong shape.
std::unique_ptr<Block> load_block(const WeightSource& source, int64_t index, Backend& backend,
                                  const BlockLoadOptions& options = {});

// Bytes per token of KV cache for one block (f32 keys and values).
int64_t kv_bytes_per_token(const ModelConfig& config);

}  // namespace corolla
