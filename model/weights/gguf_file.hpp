// GGUF (llama.cpp's model format, versions 2 and 3): metadata key-values and tensor views over a mapping.
// Every length and offset is checked against the file size; a bad file gives an error naming file and field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/weights/mapped_file.hpp"

namespace corolla {

// One metadata value. Scalars are widened (integers to i64/u64, floats to double); arrays keep one vector.
struct GgufValue {
  enum class Kind { integer, unsigned_integer, floating, boolean, string, array };
  Kind kind = Kind::integer;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool b = false;
  std::string s;
  // Arrays: element kind, and the elements in the vector that matches it.
  Kind element = Kind::integer;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  size_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;          // row-major (GGUF's ne reversed): a [K, N] ggml matrix is Shape{N, K}
  uint64_t offset = 0;  // from the start of the file
  int64_t nbytes = 0;
};

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // Parses a file already in memory (MappedFile::from_bytes): what open() does after mapping.
  static std::shared_ptr<GgufFile> parse(std::shared_ptr<MappedFile> file);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }

  // Typed metadata access; each throws std::runtime_error naming the file and key when absent or mistyped.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const GgufValue& get_array(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;

  // A view of a tensor's data inside the mapping (no copy); it keeps the mapping alive.
  Tensor tensor(const GgufTensorInfo& info) const;
  // See MappedFile::release; a tensor outside this file is left alone.
  void release(const Tensor& t) const { file_->release(t.data(), static_cast<size_t>(t.nbytes())); }

 private:
  std::shared_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace corolla
