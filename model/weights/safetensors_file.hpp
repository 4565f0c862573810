// safetensors: an 8-byte header length, a JSON header (name -> dtype, shape, data_offsets), then raw data.
// Tensors are views into a memory mapping. Every offset is checked; errors name the file and tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/tensor.hpp"
#include "model/weights/mapped_file.hpp"

namespace corolla {

struct SafetensorsInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t offset = 0;  // from the start of the file
  int64_t nbytes = 0;
};

// The safetensors format's own limit on its JSON header.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The header length a file of `file_size` bytes states in its first 8 bytes; throws naming `path` when it is above
// the format's limit or runs past the end. (A reader that fetches a file in pieces asks for this many next.)
uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size, const std::string& path);
// The tensors a JSON header describes, offsets from the start of a file of `file_size` bytes, every one checked
// (dtype, shape, size, inside the file, no overlap); throws naming `path` and the tensor.
std::map<std::string, SafetensorsInfo> parse_safetensors_header(std::string_view json, uint64_t file_size,
                                                                const std::string& path);

class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Parses a file already in memory (MappedFile::from_bytes): what open() does after mapping.
  static std::shared_ptr<SafetensorsFile> parse(std::shared_ptr<MappedFile> file);

  const std::string& path() const { return file_->path(); }
  const std::map<std::string, SafetensorsInfo>& tensors() const { return tensors_; }
  const SafetensorsInfo* find(const std::string& name) const;
  // A view into the mapping (no copy) that keeps the mapping alive.
  Tensor tensor(const SafetensorsInfo& info) const;
  // Throws naming the file when `name` is absent.
  Tensor tensor(const std::string& name) const;
  // See MappedFile::release; a tensor outside this file is left alone.
  void release(const Tensor& t) const { file_->release(t.data(), static_cast<size_t>(t.nbytes())); }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, SafetensorsInfo> tensors_;
};

// Writes tensors (host, any plain dtype) as a safetensors file; used by tools, tests and benchmarks.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace corolla
