// The stored form of one block's converted weights (a value of the node store's `weights` family): a
// self-describing record that a reader maps back to tensors without copying them.
//
// Layout, format version 1 (integers little-endian):
//   offset  size  field
//        0     4  magic "CWTS"
//        4     4  format version (u32, 1)
//        8     8  record size in bytes, checksum included (u64): a shorter value is a truncated one
//       16     4  tensor count (u32)
//       20     4  directory size in bytes (u32)
//       24     .  directory, per tensor:
//                   u16 name length, name (UTF-8)
//                   u8  dtype name length, dtype name ("f32", "bf16", "q4_1", ... as dtype_name() writes it)
//                   u8  rank (0..4), then rank x i64 dimensions
//                   u64 offset of the tensor's bytes from the start of the record (a multiple of 64)
//                   u64 byte length (storage_bytes(dtype, elements))
//        .     .  zero padding, then each tensor's bytes at its offset, zero padding between them
//   size-8     8  xxHash64 (seed 0) of every byte before it (u64)
//
// Offsets are multiples of 64 within the record, so tensors are as aligned as the buffer the record is read into
// (malloc gives 16 bytes; the CPU kernels use unaligned loads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"

namespace corolla {

inline constexpr uint32_t kWeightsRecordVersion = 1;
inline constexpr size_t kWeightsRecordAlign = 64;

// A record laid out for writing without gathering the tensors into one buffer: `parts`, concatenated, are the
// record. They point into `owned` (header, padding, checksum) and into the tensors' memory, which must stay
// alive and unchanged until the record is written.
struct EncodedWeightsRecord {
  EncodedWeightsRecord() = default;
  EncodedWeightsRecord(EncodedWeightsRecord&&) = default;  // moving keeps every part valid; copying would not
  EncodedWeightsRecord& operator=(EncodedWeightsRecord&&) = default;
  EncodedWeightsRecord(const EncodedWeightsRecord&) = delete;
  EncodedWeightsRecord& operator=(const EncodedWeightsRecord&) = delete;

  std::vector<std::string> owned;
  std::vector<std::string_view> parts;
  uint64_t size = 0;
};

// Lays out host tensors (in the given order). Throws std::invalid_argument for a device tensor or a name too long.
EncodedWeightsRecord encode_weights_record(const std::vector<std::pair<std::string, Tensor>>& tensors);

// The parts concatenated (for tests and tools).
std::string flatten(const EncodedWeightsRecord& record);

// A record that cannot be used: wrong magic, unknown format version, truncated, checksum mismatch, or an
// inconsistent directory. what() says which.
class WeightsRecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Verifies the record in `buffer` and returns its tensors as views into it; each view keeps `buffer` alive.
// Throws WeightsRecordError.
std::map<std::string, Tensor> decode_weights_record(std::shared_ptr<std::string> buffer);

}  // namespace corolla
