#include "model/weights/safetensors_file.hpp"

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/weights/tensor_extent.hpp"

namespace corolla {
namespace {

std::optional<DType> dtype_of(const std::string& s) {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  if (s == "I32") return DType::i32;
  if (s == "I64") return DType::i64;
  return std::nullopt;
}

const char* name_of(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    default: throw std::invalid_argument("safetensors cannot hold " + std::string(dtype_name(t)) + " tensors");
  }
}

// A header's list of integers (a shape, data offsets), each checked before conversion: nlohmann converts a float
// such as 8e22 to int64 with undefined behaviour. Lists longer than any rank or offset pair are refused too.
std::optional<std::vector<int64_t>> non_negative_integers(const nlohmann::json& v) {
  if (!v.is_array() || v.size() > 8) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& e : v) {
    if (!e.is_number_integer()) return std::nullopt;
    const bool in_range = e.is_number_unsigned() ? e.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())
                                                 : e.get<int64_t>() >= 0;
    if (!in_range) return std::nullopt;
    out.push_back(e.get<int64_t>());
  }
  return out;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  return parse(MappedFile::open(path));
}

uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size, const std::string& path) {
  auto fail = [&](const std::string& msg) -> void { throw std::runtime_error(path + ": invalid safetensors: " + msg); };
  if (file_size < 8) fail("file of " + std::to_string(file_size) + " bytes has no header");
  uint64_t header_len;
  std::memcpy(&header_len, first8, 8);
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail("header length " + std::to_string(header_len) + " is above the format's limit of 100 MB");
  if (header_len > file_size - 8)
    fail("header length " + std::to_string(header_len) + " runs past the end (truncated?)");
  return header_len;
}

std::map<std::string, SafetensorsInfo> parse_safetensors_header(std::string_view json, uint64_t file_size,
                                                                const std::string& path) {
  auto fail = [&](const std::string& msg) -> void { throw std::runtime_error(path + ": invalid safetensors: " + msg); };
  if (json.size() > kMaxSafetensorsHeaderBytes || json.size() > file_size || file_size - json.size() < 8)
    fail("header of " + std::to_string(json.size()) + " bytes does not fit a file of " + std::to_string(file_size));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(json.begin(), json.end());
  } catch (const std::exception& e) {
    fail(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) fail("header is not a JSON object");
  const uint64_t data_start = 8 + json.size();
  std::map<std::string, SafetensorsInfo> tensors;
  std::vector<TensorExtent> extents;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      SafetensorsInfo info;
      info.name = name;
      const std::string dt = entry.at("dtype").get<std::string>();
      auto dtype = dtype_of(dt);
      if (!dtype) fail("tensor '" + name + "' has unsupported dtype " + dt);
      info.dtype = *dtype;
      const auto dims = non_negative_integers(entry.at("shape"));
      if (!dims) fail("tensor '" + name + "' has a shape that is not a list of non-negative integers");
      switch (dims->size()) {
        case 0: info.shape = Shape{}; break;
        case 1: info.shape = Shape{(*dims)[0]}; break;
        case 2: info.shape = Shape{(*dims)[0], (*dims)[1]}; break;
        case 3: info.shape = Shape{(*dims)[0], (*dims)[1], (*dims)[2]}; break;
        case 4: info.shape = Shape{(*dims)[0], (*dims)[1], (*dims)[2], (*dims)[3]}; break;
        default: fail("tensor '" + name + "' has rank " + std::to_string(dims->size()));
      }
      const auto offsets_read = non_negative_integers(entry.at("data_offsets"));
      if (!offsets_read || offsets_read->size() != 2 || (*offsets_read)[1] < (*offsets_read)[0])
        fail("tensor '" + name + "' has bad data_offsets (two non-negative integers, begin <= end)");
      const std::vector<uint64_t> offsets((*offsets_read).begin(), (*offsets_read).end());
      const auto nbytes = checked_tensor_bytes(info.dtype, info.shape);
      if (!nbytes) fail("tensor '" + name + "' of shape " + info.shape.str() + " is too large");
      info.nbytes = *nbytes;
      if (offsets[1] - offsets[0] != static_cast<uint64_t>(info.nbytes))
        fail("tensor '" + name + "' holds " + std::to_string(offsets[1] - offsets[0]) + " bytes, its shape " +
             info.shape.str() + " needs " + std::to_string(info.nbytes));
      if (offsets[1] > file_size - data_start)
        fail("tensor '" + name + "' lies beyond the end of the file (truncated?)");
      info.offset = data_start + offsets[0];
      extents.push_back({name, info.offset, info.offset + static_cast<uint64_t>(info.nbytes)});
      tensors[name] = info;
    } catch (const nlohmann::json::exception& e) {
      fail("tensor '" + name + "': " + e.what());
    }
  }
  check_no_overlap(std::move(extents), path);
  return tensors;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(std::shared_ptr<MappedFile> file) {
  auto f = std::make_shared<SafetensorsFile>();
  f->file_ = std::move(file);
  const std::string& path = f->file_->path();
  const size_t size = f->file_->size();
  const uint64_t header_len = safetensors_header_length(f->file_->data(), size, path);
  const std::string_view header(reinterpret_cast<const char*>(f->file_->data()) + 8, header_len);
  f->tensors_ = parse_safetensors_header(header, size, path);
  return f;
}

const SafetensorsInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Tensor SafetensorsFile::tensor(const SafetensorsInfo& info) const {
  return Tensor::view(const_cast<uint8_t*>(file_->data()) + info.offset, info.dtype, info.shape, file_);
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsInfo* info = find(name);
  if (!info) throw std::runtime_error(path() + ": no tensor named '" + name + "'");
  return tensor(*info);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    std::vector<int64_t> dims;
    for (int i = 0; i < t.rank(); ++i) dims.push_back(t.dim(i));
    header[name] = {{"dtype", name_of(t.dtype())}, {"shape", dims}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += static_cast<uint64_t>(t.nbytes());
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error(path + ": cannot write");
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.data()), t.nbytes());
  if (!out) throw std::runtime_error(path + ": write failed");
}

}  // namespace corolla
