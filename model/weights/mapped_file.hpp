// A read-only memory mapping of a whole file. Weight tensors are views into it: pages are read from disk only
// when a kernel touches them, so a server hosting blocks 10-19 never reads the others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace corolla {

class MappedFile {
 public:
  // Throws std::runtime_error naming the path when the file cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  // The same interface over bytes held in memory (`name` stands for the path in errors): how the file parsers are
  // fuzzed and tested on bytes that never touch a disk.
  static std::shared_ptr<MappedFile> from_bytes(std::string name, std::string bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the pages wholly inside [p, p + n) from this process's memory when they belong to the mapping (else does
  // nothing): for a tensor copied elsewhere. They stay in the page cache, and reading them again faults them back.
  void release(const void* p, size_t n) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string owned_;  // from_bytes: the bytes themselves (nothing is mapped)
  bool mapped_ = false;
};

}  // namespace corolla
