#include "model/bounded_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace corolla {

std::string read_bounded_file(const std::string& path, size_t max_bytes, const std::string& what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  const std::streamoff size = in.tellg();
  if (size < 0) throw std::runtime_error(path + ": cannot tell its size");
  if (static_cast<uint64_t>(size) > max_bytes)
    throw std::runtime_error(path + ": " + std::to_string(size) + " bytes, above the limit of " +
                             std::to_string(max_bytes) + " for " + what);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(bytes.data(), size);
  bytes.resize(static_cast<size_t>(in.gcount()));
  return bytes;
}

}  // namespace corolla
