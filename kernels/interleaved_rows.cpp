#include "kernels/interleaved_rows.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla {
namespace {

// Where byte j of a record comes from: byte `offset` of row `row`'s block, xor `flip`.
struct Source {
  uint8_t row, offset, flip;
};

// A field of a block: `bytes` bytes at `offset`; a scalar (an f16) or an array whose 4-byte words go to vectors.
struct Field {
  int offset, bytes;
  bool scalar;
  uint8_t flip = 0;
};

// The record of a block with these fields, in this order, as the header defines it: a scalar field as 16 values
// (row 0 first), an array as vectors whose lane r byte b, in vector v, is byte 4v + b of row r's array.
std::vector<Source> record_sources(std::initializer_list<Field> fields) {
  constexpr int kRows = static_cast<int>(kInterleavedRows);
  std::vector<Source> s;
  for (const Field& f : fields)
    for (int i = 0; i < kRows * f.bytes; ++i) {
      const int row = f.scalar ? i / f.bytes : i % 64 / 4;
      const int byte = f.scalar ? i % f.bytes : i / 64 * 4 + i % 4;
      s.push_back({static_cast<uint8_t>(row), static_cast<uint8_t>(f.offset + byte), f.flip});
    }
  return s;
}

// Record bytes [at, at + len) are bytes [offset, offset + len) of row `row`'s block, each xor `flip`: the sources
// merged where they run on (a scalar's 2 bytes, an array's 4-byte word), so that placing a matrix moves words
// rather than bytes.
struct Run {
  uint16_t at;
  uint8_t row, offset, len, flip;
};

// A record's sources, their runs, and for each row the record bytes that are its block's (to take one row out).
struct Layout {
  std::vector<Source> sources;
  std::vector<Run> runs;
  std::array<std::vector<int>, kInterleavedRows> bytes_of_row;
  explicit Layout(std::vector<Source> s) : sources(std::move(s)) {
    for (size_t j = 0; j < sources.size(); ++j) {
      const Source& src = sources[j];
      bytes_of_row[src.row].push_back(static_cast<int>(j));
      if (!runs.empty()) {
        Run& r = runs.back();
        if (r.row == src.row && r.flip == src.flip && r.offset + r.len == src.offset && r.len < 4) {
          r.len++;
          continue;
        }
      }
      runs.push_back({static_cast<uint16_t>(j), src.row, src.offset, 1, src.flip});
    }
  }
};

const Layout& layout(DType plain) {
  static const Layout q4_0(record_sources({{0, 2, true}, {2, 16, false}}));
  static const Layout q8_0(record_sources({{0, 2, true}, {2, 32, false, 0x80}}));
  static const Layout q4_1(record_sources({{0, 2, true}, {2, 2, true}, {4, 16, false}}));
  static const Layout q4_K(record_sources({{0, 2, true}, {2, 2, true}, {4, 12, false}, {16, 128, false}}));
  static const Layout q5_K(
      record_sources({{0, 2, true}, {2, 2, true}, {4, 12, false}, {16, 32, false}, {48, 128, false}}));
  // q6_K in the order its kernel reads it: per half h of the values and part p (words 0..3 or 4..7 of each chunk),
  // 16 bytes of qh, then 16 of each of the two ql runs.
  static const Layout q6_K(record_sources({{208, 2, true},
                                           {192, 16, false},
                                           {128, 16, false},
                                           {0, 16, false},
                                           {32, 16, false},
                                           {144, 16, false},
                                           {16, 16, false},
                                           {48, 16, false},
                                           {160, 16, false},
                                           {64, 16, false},
                                           {96, 16, false},
                                           {176, 16, false},
                                           {80, 16, false},
                                           {112, 16, false}}));
  // q2_K: d, dmin, scales, qs; q3_K: d, scales, hmask, qs.
  static const Layout q2_K(record_sources({{80, 2, true}, {82, 2, true}, {0, 16, false}, {16, 64, false}}));
  static const Layout q3_K(record_sources({{108, 2, true}, {96, 12, false}, {0, 32, false}, {32, 64, false}}));
  switch (plain) {
    case DType::q2_K: return q2_K;
    case DType::q3_K: return q3_K;
    case DType::q4_0:
    case DType::iq4_nl: return q4_0;  // the same block layout
    case DType::q8_0: return q8_0;
    case DType::q4_1: return q4_1;
    case DType::q4_K: return q4_K;
    case DType::q5_K: return q5_K;
    case DType::q6_K: return q6_K;
    default: throw std::invalid_argument("no interleaved layout for " + std::string(dtype_name(plain)));
  }
}

void require_whole_groups(int64_t rows, int64_t k, DType plain) {
  if (rows % kInterleavedRows != 0 || k % block_elems(plain) != 0 || rows < 0 || k < 0)
    throw std::invalid_argument("interleave_rows: [" + std::to_string(rows) + ", " + std::to_string(k) + "] of " +
                                std::string(dtype_name(plain)) + " is not whole groups of 16 rows and blocks");
}

}  // namespace

std::optional<DType> interleaved_form(DType plain) {
  switch (plain) {
    case DType::q4_0: return DType::q4_0_r16;
    case DType::q8_0: return DType::q8_0_r16;
    case DType::q4_1: return DType::q4_1_r16;
    case DType::q4_K: return DType::q4_K_r16;
    case DType::q5_K: return DType::q5_K_r16;
    case DType::q6_K: return DType::q6_K_r16;
    case DType::q2_K: return DType::q2_K_r16;
    case DType::q3_K: return DType::q3_K_r16;
    case DType::iq4_nl: return DType::iq4_nl_r16;
    default: return std::nullopt;
  }
}

DType plain_form(DType t) {
  switch (t) {
    case DType::q4_0_r16: return DType::q4_0;
    case DType::q8_0_r16: return DType::q8_0;
    case DType::q4_1_r16: return DType::q4_1;
    case DType::q4_K_r16: return DType::q4_K;
    case DType::q5_K_r16: return DType::q5_K;
    case DType::q6_K_r16: return DType::q6_K;
    case DType::q2_K_r16: return DType::q2_K;
    case DType::q3_K_r16: return DType::q3_K;
    case DType::iq4_nl_r16: return DType::iq4_nl;
    default: return t;
  }
}

bool is_interleaved(DType t) { return plain_form(t) != t; }

void interleave_rows(DType plain, const void* src, void* dst, int64_t rows, int64_t k) {
  require_whole_groups(rows, k, plain);
  const Layout& l = layout(plain);
  const int64_t block = block_bytes(plain), row_bytes = storage_bytes(plain, k), chunks = k / block_elems(plain);
  const auto record = static_cast<int64_t>(l.sources.size());
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / kInterleavedRows; ++g) {
    const uint8_t* group = in + g * kInterleavedRows * row_bytes;
    for (int64_t c = 0; c < chunks; ++c, out += record)
      for (const Run& r : l.runs) {
        const uint8_t* from = group + r.row * row_bytes + c * block + r.offset;
        uint32_t word = 0;
        switch (r.len) {  // fixed sizes, so that each copy is one load and one store
          case 4: std::memcpy(&word, from, 4); break;
          case 2: std::memcpy(&word, from, 2); break;
          default: std::memcpy(&word, from, r.len); break;
        }
        word ^= r.flip * 0x01010101u;
        switch (r.len) {
          case 4: std::memcpy(out + r.at, &word, 4); break;
          case 2: std::memcpy(out + r.at, &word, 2); break;
          default: std::memcpy(out + r.at, &word, r.len); break;
        }
      }
  }
}

void deinterleave_blocks(DType t, const void* w, int64_t k, int64_t r, int64_t b0, int64_t b1, void* out) {
  const DType plain = plain_form(t);
  const Layout& l = layout(plain);
  const std::vector<Source>& s = l.sources;
  const std::vector<int>& mine = l.bytes_of_row[static_cast<size_t>(r % kInterleavedRows)];
  const int64_t block = block_bytes(plain), row_bytes = storage_bytes(plain, k);
  const auto* group = static_cast<const uint8_t*>(w) + r / kInterleavedRows * kInterleavedRows * row_bytes;
  auto* o = static_cast<uint8_t*>(out);
  for (int64_t c = b0; c < b1; ++c) {
    const uint8_t* record = group + c * static_cast<int64_t>(s.size());
    uint8_t* blk = o + (c - b0) * block;
    for (int j : mine) blk[s[j].offset] = record[j] ^ s[j].flip;
  }
}

void deinterleave_rows(DType t, const void* src, void* dst, int64_t rows, int64_t k) {
  const DType plain = plain_form(t);
  require_whole_groups(rows, k, plain);
  const int64_t row_bytes = storage_bytes(plain, k);
  for (int64_t r = 0; r < rows; ++r)
    deinterleave_blocks(t, src, k, r, 0, k / block_elems(plain), static_cast<char*>(dst) + r * row_bytes);
}

void interleaved_row_to_f32(DType t, const void* w, int64_t k, int64_t r, int64_t c0, int64_t c1, float* out) {
  const DType plain = plain_form(t);
  thread_local std::vector<uint8_t> blocks;
  const int64_t b0 = c0 / block_elems(plain), b1 = c1 / block_elems(plain);
  blocks.resize(static_cast<size_t>((b1 - b0) * block_bytes(plain)));
  deinterleave_blocks(t, w, k, r, b0, b1, blocks.data());
  to_f32(plain, blocks.data(), out, c1 - c0);
}

}  // namespace corolla
