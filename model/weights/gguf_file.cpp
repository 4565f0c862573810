#include "model/weights/gguf_file.hpp"

#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "model/weights/tensor_extent.hpp"

namespace corolla {
namespace {

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// ggml_type ids of the tensor types Corolla reads.
std::optional<DType> dtype_of_ggml(uint32_t t) {
  switch (t) {
    case 0: return DType::f32;
    case 1: return DType::f16;
    case 2: return DType::q4_0;
    case 3: return DType::q4_1;
    case 6: return DType::q5_0;
    case 7: return DType::q5_1;
    case 8: return DType::q8_0;
    case 10: return DType::q2_K;
    case 11: return DType::q3_K;
    case 12: return DType::q4_K;
    case 13: return DType::q5_K;
    case 14: return DType::q6_K;
    case 20: return DType::iq4_nl;
    case 30: return DType::bf16;
    default: return std::nullopt;
  }
}

// Bounds-checked little-endian reader over the mapping.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  // Refuses a count of `n` items of at least `min_bytes` each that the rest of the file cannot hold, before
  // anything is allocated for them.
  void need_items(uint64_t n, uint64_t min_bytes, const std::string& what) {
    if (n > remaining() / min_bytes)
      fail(what + " of " + std::to_string(n) + " does not fit in the " + std::to_string(remaining()) +
           " bytes left (truncated?)");
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw std::runtime_error(path_ + ": invalid GGUF at byte " + std::to_string(pos_) + ": " + msg);
  }

 private:
  void need(uint64_t n, const char* what) {
    if (n > size_ - pos_) fail(std::string("truncated while reading ") + what);
  }
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

GgufValue::Kind kind_of(uint32_t t, Cursor& c) {
  switch (t) {
    case kU8:
    case kU16:
    case kU32:
    case kU64: return GgufValue::Kind::unsigned_integer;
    case kI8:
    case kI16:
    case kI32:
    case kI64: return GgufValue::Kind::integer;
    case kF32:
    case kF64: return GgufValue::Kind::floating;
    case kBool: return GgufValue::Kind::boolean;
    case kString: return GgufValue::Kind::string;
    case kArray: return GgufValue::Kind::array;
    default: c.fail("unknown metadata value type " + std::to_string(t));
  }
}

// An integer of type T into both integer fields: signed types through i (u takes its bits), unsigned through u.
template <class T>
void read_integer(Cursor& c, const char* name, GgufValue& v) {
  if constexpr (std::is_signed_v<T>) {
    v.i = c.read<T>(name);
    v.u = static_cast<uint64_t>(v.i);
  } else {
    v.u = c.read<T>(name);
    v.i = static_cast<int64_t>(v.u);
  }
}

// Reads one scalar of type t as (integer, floating, string) into the value's fields.
void read_scalar(Cursor& c, uint32_t t, GgufValue& v) {
  switch (t) {
    case kU8: read_integer<uint8_t>(c, "u8", v); break;
    case kI8: read_integer<int8_t>(c, "i8", v); break;
    case kU16: read_integer<uint16_t>(c, "u16", v); break;
    case kI16: read_integer<int16_t>(c, "i16", v); break;
    case kU32: read_integer<uint32_t>(c, "u32", v); break;
    case kI32: read_integer<int32_t>(c, "i32", v); break;
    case kU64: read_integer<uint64_t>(c, "u64", v); break;
    case kI64: read_integer<int64_t>(c, "i64", v); break;
    case kF32: v.f = c.read<float>("f32"); break;
    case kF64: v.f = c.read<double>("f64"); break;
    case kBool: v.b = c.read<uint8_t>("bool") != 0; break;
    case kString: v.s = c.read_string("string"); break;
    default: c.fail("unknown scalar type " + std::to_string(t));
  }
}

// The fewest bytes one value of type t takes in the file (a string: its length).
uint64_t min_value_bytes(uint32_t t) {
  switch (t) {
    case kU8:
    case kI8:
    case kBool: return 1;
    case kU16:
    case kI16: return 2;
    case kU32:
    case kI32:
    case kF32: return 4;
    default: return 8;
  }
}

// Key length, type, and the smallest value.
constexpr uint64_t kMinMetadataBytes = 8 + 4 + 1;
// Name length, rank, one dimension, type, offset.
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Past any real file's (llama.cpp writes 32); bounds the padding before the data.
constexpr int64_t kMaxAlignment = int64_t{1} << 20;

GgufValue read_value(Cursor& c, uint32_t t) {
  GgufValue v;
  v.kind = kind_of(t, c);
  if (t != kArray) {
    read_scalar(c, t, v);
    return v;
  }
  const uint32_t et = c.read<uint32_t>("array element type");
  const uint64_t n = c.read<uint64_t>("array length");
  if (et == kArray) c.fail("nested arrays are not supported");
  v.element = kind_of(et, c);
  c.need_items(n, min_value_bytes(et), "array length");
  GgufValue e;
  switch (v.element) {
    case GgufValue::Kind::string:
      v.strings.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.strings.push_back(c.read_string("array string"));
      break;
    case GgufValue::Kind::floating:
      v.floats.reserve(n);
      for (uint64_t k = 0; k < n; ++k) read_scalar(c, et, e), v.floats.push_back(e.f);
      break;
    case GgufValue::Kind::boolean:
      v.ints.reserve(n);
      for (uint64_t k = 0; k < n; ++k) read_scalar(c, et, e), v.ints.push_back(e.b);
      break;
    default:
      v.ints.reserve(n);
      for (uint64_t k = 0; k < n; ++k) read_scalar(c, et, e), v.ints.push_back(e.i);
      break;
  }
  return v;
}

}  // namespace

size_t GgufValue::array_size() const {
  switch (element) {
    case Kind::string: return strings.size();
    case Kind::floating: return floats.size();
    default: return ints.size();
  }
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) { return parse(MappedFile::open(path)); }

std::shared_ptr<GgufFile> GgufFile::parse(std::shared_ptr<MappedFile> file) {
  auto g = std::make_shared<GgufFile>();
  g->file_ = std::move(file);
  const std::string& path = g->file_->path();
  Cursor c(g->file_->data(), g->file_->size(), path);
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u) c.fail("not a GGUF file (magic bytes are not 'GGUF')");
  g->version_ = c.read<uint32_t>("version");
  if (g->version_ < 2 || g->version_ > 3) c.fail("unsupported GGUF version " + std::to_string(g->version_));
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  c.need_items(n_kv, kMinMetadataBytes, "metadata count");
  c.need_items(n_tensors, kMinTensorInfoBytes, "tensor count");
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    const uint32_t t = c.read<uint32_t>("metadata type");
    GgufValue v = read_value(c, t);
    if (!g->metadata_.emplace(key, std::move(v)).second) c.fail("metadata key '" + key + "' appears twice");
  }
  uint64_t alignment = 32;
  if (auto a = g->find_int("general.alignment")) {
    if (*a <= 0 || *a > kMaxAlignment || (*a & (*a - 1)) != 0)
      c.fail("general.alignment " + std::to_string(*a) + " is not a power of two up to " +
             std::to_string(kMaxAlignment));
    alignment = static_cast<uint64_t>(*a);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    info.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor rank");
    if (n_dims == 0 || n_dims > 4) c.fail("tensor '" + info.name + "' has rank " + std::to_string(n_dims));
    int64_t ne[4] = {1, 1, 1, 1};
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t v = c.read<uint64_t>("tensor dimension");
      if (v == 0 || v > (uint64_t{1} << 40)) c.fail("tensor '" + info.name + "' has dimension " + std::to_string(v));
      ne[d] = static_cast<int64_t>(v);
    }
    const uint32_t type = c.read<uint32_t>("tensor type");
    auto dt = dtype_of_ggml(type);
    if (!dt)
      c.fail("tensor '" + info.name + "' has ggml type " + std::to_string(type) +
             " (supported: " + weight_dtype_list() + ")");
    info.dtype = *dt;
    switch (n_dims) {
      case 1: info.shape = Shape{ne[0]}; break;
      case 2: info.shape = Shape{ne[1], ne[0]}; break;
      case 3: info.shape = Shape{ne[2], ne[1], ne[0]}; break;
      default: info.shape = Shape{ne[3], ne[2], ne[1], ne[0]}; break;
    }
    if (ne[0] % block_elems(info.dtype) != 0)
      c.fail("tensor '" + info.name + "' rows of " + std::to_string(ne[0]) + " do not fill whole " +
             std::string(dtype_name(info.dtype)) + " blocks");
    const auto nbytes = checked_tensor_bytes(info.dtype, info.shape);
    if (!nbytes) c.fail("tensor '" + info.name + "' of shape " + info.shape.str() + " is too large");
    info.nbytes = *nbytes;
    info.offset = c.read<uint64_t>("tensor offset");
    if (!g->tensor_index_.emplace(info.name, g->tensors_.size()).second)
      c.fail("tensor '" + info.name + "' appears twice");
    g->tensors_.push_back(std::move(info));
  }
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  const uint64_t size = g->file_->size();
  std::vector<TensorExtent> extents;
  extents.reserve(g->tensors_.size());
  for (auto& t : g->tensors_) {
    if (t.offset % alignment != 0) c.fail("tensor '" + t.name + "' offset is not aligned");
    const uint64_t nbytes = static_cast<uint64_t>(t.nbytes);
    if (data_start > size || t.offset > size - data_start || nbytes > size - data_start - t.offset)
      throw std::runtime_error(path + ": tensor '" + t.name + "' (" + std::to_string(t.nbytes) +
                               " bytes) lies beyond the end of the file (truncated?)");
    t.offset += data_start;
    extents.push_back({t.name, t.offset, t.offset + nbytes});
  }
  check_no_overlap(std::move(extents), path);
  return g;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::tensor(const GgufTensorInfo& info) const {
  return Tensor::view(const_cast<uint8_t*>(file_->data()) + info.offset, info.dtype, info.shape, file_);
}

namespace {
[[noreturn]] void missing(const std::string& path, const std::string& key, const char* want) {
  throw std::runtime_error(path + ": GGUF metadata key '" + key + "' is missing or not " + want);
}
}  // namespace

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  const auto& v = it->second;
  if (v.kind == GgufValue::Kind::integer || v.kind == GgufValue::Kind::unsigned_integer) return v.i;
  return std::nullopt;
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  const auto& v = it->second;
  if (v.kind == GgufValue::Kind::floating) return v.f;
  if (v.kind == GgufValue::Kind::integer || v.kind == GgufValue::Kind::unsigned_integer)
    return static_cast<double>(v.i);
  return std::nullopt;
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end() || it->second.kind != GgufValue::Kind::string) return std::nullopt;
  return it->second.s;
}

int64_t GgufFile::get_int(const std::string& key) const {
  if (auto v = find_int(key)) return *v;
  missing(path(), key, "an integer");
}

double GgufFile::get_float(const std::string& key) const {
  if (auto v = find_float(key)) return *v;
  missing(path(), key, "a number");
}

bool GgufFile::get_bool(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end() || it->second.kind != GgufValue::Kind::boolean) missing(path(), key, "a boolean");
  return it->second.b;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end() || it->second.kind != GgufValue::Kind::string) missing(path(), key, "a string");
  return it->second.s;
}

const GgufValue& GgufFile::get_array(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end() || it->second.kind != GgufValue::Kind::array) missing(path(), key, "an array");
  return it->second;
}

}  // namespace corolla
