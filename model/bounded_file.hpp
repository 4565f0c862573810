// Reading a whole small file (a config, a tokenizer, an index) whose size an outsider chooses: the size is checked
// before anything is allocated, so a sparse file of terabytes costs an error, not the node's memory.
#pragma once

#include <cstddef>
#include <string>

namespace corolla {

// JSON and TOML files that describe a model or a node: real ones are kilobytes.
constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;
// tokenizer.json of real models reaches tens of megabytes.
constexpr size_t kMaxTokenizerFileBytes = size_t{256} << 20;

// The file's bytes. Throws std::runtime_error "PATH: cannot open..." or "PATH: N bytes, above the limit of M for
// WHAT" before reading when the file is larger than `max_bytes`.
std::string read_bounded_file(const std::string& path, size_t max_bytes, const std::string& what);

}  // namespace corolla
