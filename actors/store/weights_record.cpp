#include "actors/store/weights_record.hpp"

#include "actors/store/byte_order.hpp"
#include "actors/store/xxhash64.hpp"

namespace corolla {
namespace {

constexpr std::string_view kMagic = "CWTS";
constexpr size_t kFixedHeader = 24;
constexpr size_t kChecksumSize = 8;
const std::string kZeros(kWeightsRecordAlign, '\0');

uint64_t align_up(uint64_t n) { return (n + kWeightsRecordAlign - 1) / kWeightsRecordAlign * kWeightsRecordAlign; }

Shape make_shape(const int64_t* d, int rank) {
  switch (rank) {
    case 0: return Shape{};
    case 1: return Shape{d[0]};
    case 2: return Shape{d[0], d[1]};
    case 3: return Shape{d[0], d[1], d[2]};
    default: return Shape{d[0], d[1], d[2], d[3]};
  }
}

// Bounds-checked reading of the directory.
class Reader {
 public:
  Reader(const char* p, size_t size) : p_(p), end_(p + size) {}
  template <class T>
  T get(const char* field) {
    need(sizeof(T), field);
    T v = store::get_le<T>(p_);
    p_ += sizeof(T);
    return v;
  }
  std::string_view bytes(size_t n, const char* field) {
    need(n, field);
    std::string_view v(p_, n);
    p_ += n;
    return v;
  }

 private:
  void need(size_t n, const char* field) const {
    if (static_cast<size_t>(end_ - p_) < n)
      throw WeightsRecordError(std::string("the directory ends inside a tensor's ") + field);
  }
  const char* p_;
  const char* end_;
};

}  // namespace

EncodedWeightsRecord encode_weights_record(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  // Where everything goes: the directory's size depends only on names, dtypes and ranks.
  size_t dir_size = 0;
  for (const auto& [name, t] : tensors) {
    if (t.device() != Device::cpu)
      throw std::invalid_argument("weights record: tensor '" + name + "' is not on the host");
    if (name.size() > UINT16_MAX) throw std::invalid_argument("weights record: a tensor name is too long");
    dir_size += 2 + name.size() + 1 + dtype_name(t.dtype()).size() + 1 + 8 * static_cast<size_t>(t.rank()) + 16;
  }
  const uint64_t data_start = align_up(kFixedHeader + dir_size);
  std::vector<uint64_t> offsets;
  uint64_t at = data_start;
  for (const auto& [name, t] : tensors) {
    offsets.push_back(at);
    at = align_up(at + static_cast<uint64_t>(t.nbytes()));
  }
  const uint64_t size = at + kChecksumSize;

  std::string header;
  header.reserve(data_start);
  header += kMagic;
  store::put_le<uint32_t>(header, kWeightsRecordVersion);
  store::put_le<uint64_t>(header, size);
  store::put_le<uint32_t>(header, static_cast<uint32_t>(tensors.size()));
  store::put_le<uint32_t>(header, static_cast<uint32_t>(dir_size));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    const std::string_view dtype = dtype_name(t.dtype());
    store::put_le<uint16_t>(header, static_cast<uint16_t>(name.size()));
    header += name;
    store::put_le<uint8_t>(header, static_cast<uint8_t>(dtype.size()));
    header += dtype;
    store::put_le<uint8_t>(header, static_cast<uint8_t>(t.rank()));
    for (int d = 0; d < t.rank(); ++d) store::put_le<int64_t>(header, t.dim(d));
    store::put_le<uint64_t>(header, offsets[i]);
    store::put_le<uint64_t>(header, static_cast<uint64_t>(t.nbytes()));
  }
  header.resize(data_start, '\0');

  EncodedWeightsRecord rec;
  rec.owned.reserve(2);  // no reallocation: parts point into these strings
  rec.owned.push_back(std::move(header));
  rec.parts.push_back(rec.owned.back());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    const uint64_t end = offsets[i] + static_cast<uint64_t>(t.nbytes());
    rec.parts.emplace_back(static_cast<const char*>(t.data()), static_cast<size_t>(t.nbytes()));
    if (align_up(end) > end) rec.parts.emplace_back(kZeros.data(), align_up(end) - end);
  }
  store::XxHash64 h(0);
  for (auto p : rec.parts) h.update(p);
  std::string trailer;
  store::put_le<uint64_t>(trailer, h.digest());
  rec.owned.push_back(std::move(trailer));
  rec.parts.push_back(rec.owned.back());
  rec.size = size;
  return rec;
}

std::string flatten(const EncodedWeightsRecord& record) {
  std::string out;
  out.reserve(record.size);
  for (auto p : record.parts) out += p;
  return out;
}

std::map<std::string, Tensor> decode_weights_record(std::shared_ptr<std::string> buffer) {
  const std::string& b = *buffer;
  if (b.size() < kFixedHeader + kChecksumSize)
    throw WeightsRecordError("truncated: " + std::to_string(b.size()) + " bytes, shorter than any record");
  if (std::string_view(b.data(), 4) != kMagic) throw WeightsRecordError("not a weights record (wrong magic)");
  const uint32_t version = store::get_le<uint32_t>(b.data() + 4);
  if (version != kWeightsRecordVersion)
    throw WeightsRecordError("unknown format version " + std::to_string(version) + " (this build reads " +
                             std::to_string(kWeightsRecordVersion) + ")");
  const uint64_t size = store::get_le<uint64_t>(b.data() + 8);
  if (size != b.size())
    throw WeightsRecordError((b.size() < size ? "truncated: " : "overlong: ") + std::to_string(b.size()) +
                             " bytes where the header says " + std::to_string(size));
  const uint64_t stored = store::get_le<uint64_t>(b.data() + b.size() - kChecksumSize);
  const uint64_t actual = store::xxhash64(b.data(), b.size() - kChecksumSize, 0);
  if (stored != actual) throw WeightsRecordError("checksum mismatch");

  const uint32_t count = store::get_le<uint32_t>(b.data() + 16);
  const uint32_t dir_size = store::get_le<uint32_t>(b.data() + 20);
  if (dir_size > b.size() - kFixedHeader - kChecksumSize)
    throw WeightsRecordError("the directory runs past the end of the record");
  const uint64_t data_end = b.size() - kChecksumSize;
  Reader r(b.data() + kFixedHeader, dir_size);
  std::map<std::string, Tensor> out;
  auto keep_alive = std::shared_ptr<const void>(buffer, buffer.get());
  for (uint32_t i = 0; i < count; ++i) {
    const auto name_len = r.get<uint16_t>("name length");
    std::string name(r.bytes(name_len, "name"));
    const auto dtype_len = r.get<uint8_t>("dtype length");
    const std::string_view dtype_str = r.bytes(dtype_len, "dtype");
    const auto dtype = parse_dtype(dtype_str);
    if (!dtype) throw WeightsRecordError("tensor '" + name + "' has an unknown dtype '" + std::string(dtype_str) + "'");
    const auto rank = r.get<uint8_t>("rank");
    if (rank > Shape::kMaxDims) throw WeightsRecordError("tensor '" + name + "' has rank " + std::to_string(rank));
    int64_t dims[Shape::kMaxDims] = {};
    for (int d = 0; d < rank; ++d) {
      dims[d] = r.get<int64_t>("shape");
      if (dims[d] < 0) throw WeightsRecordError("tensor '" + name + "' has a negative dimension");
    }
    const Shape shape = make_shape(dims, rank);
    const auto offset = r.get<uint64_t>("offset");
    const auto length = r.get<uint64_t>("length");
    if (shape.numel() % block_elems(*dtype) != 0 ||
        length != static_cast<uint64_t>(storage_bytes(*dtype, shape.numel())))
      throw WeightsRecordError("tensor '" + name + "': " + std::to_string(length) + " bytes do not hold " +
                               std::string(dtype_str) + shape.str());
    if (offset % kWeightsRecordAlign != 0 || offset < kFixedHeader + dir_size || offset > data_end ||
        length > data_end - offset)
      throw WeightsRecordError("tensor '" + name + "' lies outside the record's data");
    if (!out.emplace(name, Tensor::view(buffer->data() + offset, *dtype, shape, keep_alive)).second)
      throw WeightsRecordError("tensor '" + name + "' appears twice");
  }
  return out;
}

}  // namespace corolla
