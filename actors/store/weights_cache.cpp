#include "actors/store/weights_cache.hpp"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <type_traits>

#include "actors/store/byte_order.hpp"
#include "actors/store/node_store.hpp"
#include "actors/store/weights_record.hpp"
#include "actors/store/xxhash64.hpp"
#include "model/weights/tensor_map_source.hpp"

namespace corolla {
namespace fs = std::filesystem;

namespace {

// Bump when conversion code (dequantizers, casts, GGUF Q/K un-permutation, the blocks' weight layout) changes its
// output: every model digest changes with it, so entries converted by older code are never served.
constexpr std::string_view kConversionEpoch = "corolla converted weights, epoch 1";

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void describe_config(const ModelConfig& c, std::string& d) {
  auto field = [&](std::string_view name, const auto& v) {
    d += name;
    d += '=';
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
      d += v;
    else
      d += std::to_string(v);
    d += '\n';
  };
  field("arch", c.arch);
  field("vocab_size", c.vocab_size);
  field("hidden_size", c.hidden_size);
  field("intermediate_size", c.intermediate_size);
  field("num_layers", c.num_layers);
  field("num_heads", c.num_heads);
  field("num_kv_heads", c.num_kv_heads);
  field("head_dim", c.head_dim);
  field("max_position", c.max_position);
  d += "doubles=";  // exact bits: to_string would round
  for (double v : {c.norm_eps, c.rope_theta, c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                   c.rope_scaling.high_freq_factor, c.rope_scaling.beta_fast, c.rope_scaling.beta_slow,
                   c.rope_scaling.attention_factor, c.rope_scaling.mscale, c.rope_scaling.mscale_all_dim})
    store::put_le_double(d, v);
  d += '\n';
  field("rope_scaling", c.rope_scaling.type);
  field("rope_original_max_position", c.rope_scaling.original_max_position);
  field("rope_truncate", static_cast<int>(c.rope_scaling.truncate));
  d += "rope_freq_factors=";
  for (float f : c.rope_freq_factors) store::put_le(d, std::bit_cast<uint32_t>(f));
  d += '\n';
  field("tie_word_embeddings", static_cast<int>(c.tie_word_embeddings));
  field("qkv_bias", static_cast<int>(c.qkv_bias));
  field("o_bias", static_cast<int>(c.o_bias));
  field("mlp_bias", static_cast<int>(c.mlp_bias));
  field("qk_norm", static_cast<int>(c.qk_norm));
  field("bos", c.bos_token_id);
  d += "eos=";
  for (int32_t e : c.eos_token_ids) d += std::to_string(e) + ',';
  d += '\n';
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string model_digest(const WeightSource& source) {
  std::string d(kConversionEpoch);
  d += '\n';
  describe_config(source.config(), d);
  std::vector<std::string> names = source.names();
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    const auto meta = source.meta(name);
    d += name + ' ' + std::string(dtype_name(meta.dtype)) + meta.shape.str() + '\n';
  }
  for (const auto& file : source.files()) {
    std::error_code ec;
    const fs::path path = fs::canonical(file, ec);
    const auto size = ec ? 0 : fs::file_size(path, ec);
    const auto mtime = ec ? fs::file_time_type() : fs::last_write_time(path, ec);
    if (ec) throw std::runtime_error(file + ": cannot read its size and modification time: " + ec.message());
    d += "file " + path.string() + ' ' + std::to_string(size) + ' ' + std::to_string(mtime.time_since_epoch().count()) +
         '\n';
  }
  // 128 bits from two seeds: names, not security.
  return hex64(store::xxhash64(d.data(), d.size(), 0)) +
         hex64(store::xxhash64(d.data(), d.size(), 0x636f726f6c6c61ull));
}

std::string WeightsKey::str() const {
  char idx[32];
  std::snprintf(idx, sizeof idx, "%06lld", static_cast<long long>(block));
  return model + '/' + idx + '/' + dtype;
}

std::string serving_dtype_key(std::optional<DType> dtype) {
  return dtype ? std::string(dtype_name(*dtype)) : std::string("auto");
}

WeightsCache::WeightsCache(NodeStore& store, Warning on_warning) : store_(store), on_warning_(std::move(on_warning)) {}

WeightsCache::Lookup WeightsCache::get(const WeightsKey& key) const {
  Lookup out;
  const std::string k = key.str();
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;        // each record is read once, at load time
  ro.verify_checksums = false;  // the record's own checksum covers the value; a bad blob reference reads garbage
                                // that fails it too
  auto buffer = std::make_shared<std::string>();
  const rocksdb::Status s = store_.db().Get(ro, store_.family(StoreFamily::weights), k, buffer.get());
  if (s.IsNotFound()) return out;
  std::string problem;
  if (s.ok()) {
    out.bytes = buffer->size();
    try {
      out.tensors = decode_weights_record(buffer);
      out.status = Status::hit;
      return out;
    } catch (const WeightsRecordError& e) {
      problem = e.what();
    }
  } else if (s.IsCorruption()) {
    problem = s.ToString();
  } else {
    throw std::runtime_error("node database " + store_.path() + ": cannot read weights/" + k + ": " + s.ToString());
  }
  out.tensors.clear();
  out.status = Status::corrupt;
  out.problem = "weights cache entry " + k + " in " + store_.path() + " rejected (" + problem + "); deleted";
  store_.erase_raw(StoreFamily::weights, k);
  if (on_warning_) on_warning_(out.problem);
  return out;
}

uint64_t WeightsCache::put(const WeightsKey& key, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const EncodedWeightsRecord rec = encode_weights_record(tensors);
  const std::string k = key.str();
  std::vector<rocksdb::Slice> parts;
  parts.reserve(rec.parts.size());
  for (auto p : rec.parts) parts.emplace_back(p.data(), p.size());
  const rocksdb::Slice key_slice(k);
  rocksdb::WriteBatch batch;
  rocksdb::Status s = batch.Put(store_.family(StoreFamily::weights), rocksdb::SliceParts(&key_slice, 1),
                                rocksdb::SliceParts(parts.data(), static_cast<int>(parts.size())));
  if (s.ok()) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;  // a cache: losing unflushed entries in a crash costs only a conversion
    s = store_.db().Write(wo, &batch);
  }
  if (!s.ok())
    throw std::runtime_error("node database " + store_.path() + ": cannot write weights/" + k + " (" +
                             std::to_string(rec.size) + " bytes): " + s.ToString());
  return rec.size;
}

void WeightsCache::erase(const WeightsKey& key) { store_.erase_raw(StoreFamily::weights, key.str()); }

std::string_view outcome_name(LoadReport::Outcome outcome) {
  switch (outcome) {
    case LoadReport::Outcome::uncached: return "uncached";
    case LoadReport::Outcome::hit: return "hit";
    case LoadReport::Outcome::miss: return "miss";
    case LoadReport::Outcome::rebuilt: return "rebuilt";
  }
  return "?";
}

std::unique_ptr<Block> load_block_cached(NodeStore* store, const WeightSource& source, int64_t index, Backend& backend,
                                         const BlockLoadOptions& options, LoadReport* report) {
  if (!store) return load_block_cached(nullptr, std::string(), source, index, backend, options, report);
  return load_block_cached(store, model_digest(source), source, index, backend, options, report);
}

std::unique_ptr<Block> load_block_cached(NodeStore* store, const std::string& digest, const WeightSource& source,
                                         int64_t index, Backend& backend, const BlockLoadOptions& options,
                                         LoadReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  LoadReport r;
  std::unique_ptr<Block> block;
  if (!store) {
    block = load_block(source, index, backend, options);
    r.seconds = since(t0);
    if (report) *report = std::move(r);
    return block;
  }

  WeightsCache cache(*store);
  const WeightsKey key{digest, index, serving_dtype_key(options.dtype)};
  auto tc = std::chrono::steady_clock::now();
  WeightsCache::Lookup found = cache.get(key);
  r.cache_seconds = since(tc);
  r.cache_bytes = found.bytes;
  if (found.status == WeightsCache::Status::hit) {
    try {
      const TensorMapSource cached(source.config(), std::move(found.tensors), store->path() + " weights/" + key.str());
      BlockLoadOptions as_stored = options;
      as_stored.dtype = std::nullopt;  // already in the serving dtype
      block = load_block(cached, index, backend, as_stored);
      r.outcome = LoadReport::Outcome::hit;
    } catch (const std::exception& e) {
      // A record that verifies but does not fit the model (written by faulty code): never serve it.
      found.status = WeightsCache::Status::corrupt;
      found.problem =
          "weights cache entry " + key.str() + " in " + store->path() + " rejected (" + e.what() + "); deleted";
      cache.erase(key);
    }
  }
  if (!block) {
    r.outcome =
        found.status == WeightsCache::Status::corrupt ? LoadReport::Outcome::rebuilt : LoadReport::Outcome::miss;
    r.problem = found.problem;
    block = load_block(source, index, backend, options);
    auto named = block->named_weights();
    tc = std::chrono::steady_clock::now();
    try {
      for (auto& [name, t] : named) t = backend.download_weight(t);  // in the file's dtype and layout
      r.cache_bytes = cache.put(key, named);
    } catch (const std::exception& e) {
      r.cache_bytes = 0;
      r.problem += std::string(r.problem.empty() ? "" : "; ") + "not cached: " + e.what();
    }
    r.cache_seconds += since(tc);
  }
  r.seconds = since(t0);
  if (report) *report = std::move(r);
  return block;
}

}  // namespace corolla
