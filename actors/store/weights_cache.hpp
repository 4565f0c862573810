// WeightsCache: block weights already converted to the serving dtype (dequantized or cast, GGUF Q/K rows
// un-permuted), kept in the node store's `weights` family so that a restart skips conversion.
//
//   NodeStore store(data_dir);
//   auto source = open_weights(model_path);
//   LoadReport report;
//   auto block = load_block_cached(&store, *source, 7, backend, {DType::f32}, &report);   // miss: converts, stores
//   ...restart...
//   auto block = load_block_cached(&store, *source, 7, backend, {DType::f32}, &report);   // hit: no conversion
//
// Key: "<model digest>/<block, 6 digits>/<serving dtype or auto>", for example "9c0e…41/000007/f32".
// Value: one self-describing record per block (weights_record.hpp) ending in an xxHash64 checksum. A record that
// fails verification (checksum, truncation, unknown format version) is reported, deleted and treated as a miss:
// it is never served, and the next load stores a fresh one.
// On a hit the tensors are views into the one buffer the record was read into (no per-tensor copy); on the CPU
// backend the block keeps that buffer alive for as long as it lives, and it does not need the store any more.
//
// Writes skip RocksDB's write-ahead log (a crash loses only cache entries: misses on the next start); closing the
// store flushes them. A record must stay under 4 GiB (RocksDB's value limit): larger blocks are loaded but not
// cached, and the report says so.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/block.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

class NodeStore;

// Names a model's weights for the cache, cheaply but safely: a hash of the configuration, every tensor's name,
// dtype and shape, and each underlying file's canonical path, size and modification time (contents are not read).
// Editing, replacing or touching a file changes it; so does a new conversion epoch (bumped when conversion code
// changes its output). 32 hexadecimal digits. For a source without files (in memory), only config and tensor
// descriptions count.
std::string model_digest(const WeightSource& source);

struct WeightsKey {
  std::string model;  // model_digest()
  int64_t block = 0;
  std::string dtype;  // serving dtype ("f32", "bf16", ...) or "auto" (stored dtypes kept)
  std::string str() const;
};

// "auto" for nullopt, else the dtype's name.
std::string serving_dtype_key(std::optional<DType> dtype);

class WeightsCache {
 public:
  enum class Status : uint8_t { hit, miss, corrupt };
  struct Lookup {
    Status status = Status::miss;
    std::map<std::string, Tensor> tensors;  // on a hit: host views into one buffer, each keeping it alive
    uint64_t bytes = 0;                     // size of the record read
    std::string problem;                    // when corrupt: what was wrong (the entry is already deleted)
  };
  using Warning = std::function<void(const std::string&)>;

  // `on_warning` hears about every rejected record (in addition to Lookup::problem).
  explicit WeightsCache(NodeStore& store, Warning on_warning = {});

  Lookup get(const WeightsKey& key) const;
  // Stores host tensors (as Block::named_weights() gives them on the CPU backend) and returns the record's size.
  // Throws std::runtime_error when the store refuses the write, std::invalid_argument for device tensors.
  uint64_t put(const WeightsKey& key, const std::vector<std::pair<std::string, Tensor>>& tensors);
  void erase(const WeightsKey& key);

 private:
  NodeStore& store_;
  Warning on_warning_;
};

struct LoadReport {
  enum class Outcome : uint8_t {
    uncached,  // no store: loaded from the source
    hit,       // loaded from the cache, no conversion
    miss,      // converted from the source, then stored
    rebuilt,   // a stored entry was rejected (see problem), converted from the source again and stored
  };
  Outcome outcome = Outcome::uncached;
  double seconds = 0;        // the whole call
  double cache_seconds = 0;  // reading and verifying (hit) or writing (miss, rebuilt) the record
  uint64_t cache_bytes = 0;  // the record's size
  std::string problem;       // why a stored entry was rejected, or why a new one could not be stored
};

std::string_view outcome_name(LoadReport::Outcome outcome);

// load_block() through the cache. With a null store: load_block() alone. On a hit: the block is loaded from the
// cached tensors (TensorMapSource with the source's config, dtype as stored). On a miss: loaded from `source`, and
// its named_weights() (downloaded to the host first on a device backend) are stored. Failing to store is not an
// error: the block is returned and the report says why. Errors of load_block() propagate.
std::unique_ptr<Block> load_block_cached(NodeStore* store, const WeightSource& source, int64_t index, Backend& backend,
                                         const BlockLoadOptions& options = {}, LoadReport* report = nullptr);
// The same with model_digest(source) computed once by the caller (when loading many blocks).
std::unique_ptr<Block> load_block_cached(NodeStore* store, const std::string& digest, const WeightSource& source,
                                         int64_t index, Backend& backend, const BlockLoadOptions& options = {},
                                         LoadReport* report = nullptr);

}  // namespace corolla
