// WeightSource: a model's config and tensors under Hugging Face names, whatever the file format.
//
//   auto src = open_weights("models/llama");          // directory: config.json + safetensors (single or sharded)
//   auto src = open_weights("smollm2.Q4_1.gguf");     // GGUF: names translated, Q/K rows un-permuted for llama
//   Tensor wq = src->get("model.layers.3.self_attn.q_proj.weight");
//
// Tensors are views into memory mappings when the stored layout is usable as is, so only the tensors asked for
// are ever read from disk; bytes_requested() counts them (a server hosting blocks 10-19 reads only those).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/config.hpp"

namespace corolla {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const ModelConfig& config() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // Throws std::runtime_error naming the file and tensor when it is absent.
  virtual Tensor get(const std::string& name) const = 0;
  // Every tensor name (Hugging Face naming) the source holds.
  virtual std::vector<std::string> names() const = 0;
  // Where the weights come from (a path), for messages.
  virtual std::string origin() const = 0;
  // The GGUF file, when the source is one (tokenizer and chat template live in its metadata).
  virtual std::shared_ptr<const class GgufFile> gguf() const { return nullptr; }
  // The files the config and tensors are read from (empty for sources held in memory): what a cache of converted
  // weights checks for changes.
  virtual std::vector<std::string> files() const { return {}; }
  // A tensor's dtype and shape as get() would return them, without reading or converting its data where the
  // format allows (the default calls get()). Throws like get() when it is absent.
  struct TensorMeta {
    DType dtype;
    Shape shape;
  };
  virtual TensorMeta meta(const std::string& name) const {
    const Tensor t = get(name);
    return {t.dtype(), t.shape()};
  }

  // `t`, handed out by get(), has been copied (to a device, to page-aligned memory) and the copy serves: where `t`
  // is a view into a memory-mapped file, its pages are dropped from this process (the page cache keeps them), so
  // that they do not count twice in its memory. Reading `t` again stays correct: it faults the pages back in.
  virtual void release(const Tensor& t) const { (void)t; }

  // Bytes of tensor data handed out by get() so far.
  uint64_t bytes_requested() const { return bytes_requested_.load(); }

 protected:
  void count(const Tensor& t) const { bytes_requested_ += static_cast<uint64_t>(t.nbytes()); }

 private:
  mutable std::atomic<uint64_t> bytes_requested_{0};
};

// Opens a model directory (config.json + model.safetensors or model.safetensors.index.json) or a .gguf file.
std::shared_ptr<WeightSource> open_weights(const std::string& path);

// Hugging Face names of one block's tensors.
std::string block_tensor_name(int64_t block, const std::string& suffix);
// The block a tensor name of a Hugging Face checkpoint belongs to: N of "model.layers.N.…", "h.N.…",
// "transformer.h.N.…" (any "….layers.N.…" or "….h.N.…"); nullopt for the rest (embeddings, final norm, heads).
std::optional<int64_t> checkpoint_block_of(std::string_view tensor_name);
// The lowest block any tensor of `source` belongs to (a server's download may hold only its span); 0 when none.
int64_t first_block_held(const WeightSource& source);
// The dtype a model's blocks are stored in, named: the one that holds most of the matrix elements of the first block
// the source holds (a GGUF file mixes them: Q4_K_M's blocks are mostly q4_K, some q6_K; a server's download may
// hold only its span); "auto" when that block has no matrix.
std::string stored_dtype_name(const WeightSource& source);
// The block number in a tensor name read from a file ("12" of "blk.12.attn_q.weight"), or nullopt when it is not
// a plain decimal number small enough to be one.
std::optional<int64_t> parse_block_number(std::string_view digits);

}  // namespace corolla
