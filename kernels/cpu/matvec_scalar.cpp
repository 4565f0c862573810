// Portable reference kernels: the correctness baseline for the SIMD ones and the fallback for old CPUs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/activation_rounding.hpp"
#include "kernels/cpu/matvec.hpp"
#include "kernels/interleaved_rows.hpp"

namespace corolla {
namespace {

// Eight partial sums let the compiler vectorise without reassociating floating-point math.
template <class Load>
float dot8(int64_t k, const float* x, Load load) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += load(i + j) * x[i + j];
  float s = 0;
  for (; i < k; ++i) s += load(i) * x[i];
  for (float a : acc) s += a;
  return s;
}

void mv_f32(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = static_cast<const float*>(w) + r * k;
    y[r] = dot8(k, x, [row](int64_t i) { return row[i]; });
  }
}

void mv_f16(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = static_cast<const uint16_t*>(w) + r * k;
    y[r] = dot8(k, x, [row](int64_t i) { return f16_to_f32(row[i]); });
  }
}

void mv_bf16(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* row = static_cast<const uint16_t*>(w) + r * k;
    y[r] = dot8(k, x, [row](int64_t i) { return bf16_to_f32(row[i]); });
  }
}

// --- quantized weights: integer dot products with activations quantized to 8 bits (matvec.hpp) -------------------

struct ActChunk {
  int8_t q[kQuantBlock];
  float d;
  int32_t sum;      // of q
  int32_t half[2];  // of q[0..15] and q[16..31]
};

// Chunk c (32 values) of a weight row as integers w (the stored level minus the format's offset), the scale of
// each half (values 0..15 and 16..31) and the coefficient of the chunk's activation sum (the format's min, or 0),
// or of each half's sum (q2_K's min per 16 values): the weights are ws[i / 16] * w[i] + mc + mc_half[i / 16].
struct Chunk {
  int w[kQuantBlock];
  float ws[2];
  float mc = 0;
  float mc_half[2] = {0, 0};
};

void decode_q8_0(const char* row, int64_t c, Chunk& o) {
  const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[c];
  for (int i = 0; i < kQuantBlock; ++i) o.w[i] = b.qs[i];
  o.ws[0] = o.ws[1] = f16_to_f32_table()[b.d];
}

template <class Block>
void decode_q4(const char* row, int64_t c, Chunk& o) {
  const Block& b = reinterpret_cast<const Block*>(row)[c];
  constexpr bool kMin = requires { b.m; };
  uint32_t qh = 0;
  if constexpr (requires { b.qh; }) std::memcpy(&qh, b.qh, 4);
  constexpr bool kHasFifthBit = requires { b.qh; };
  constexpr int kFifth = kHasFifthBit ? 16 : 0;  // the fifth bit's weight, and q5_0's offset
  for (int i = 0; i < kQuantBlock / 2; ++i) {
    const int lo = (b.qs[i] & 15) | (kFifth && (qh >> i & 1) ? 16 : 0);
    const int hi = (b.qs[i] >> 4) | (kFifth && (qh >> (i + 16) & 1) ? 16 : 0);
    const int offset = kMin ? 0 : kFifth ? 16 : 8;
    o.w[i] = lo - offset;
    o.w[i + 16] = hi - offset;
  }
  o.ws[0] = o.ws[1] = f16_to_f32_table()[b.d];
  if constexpr (kMin) o.mc = f16_to_f32_table()[b.m];
}

template <class Block>
void decode_q45_K(const char* row, int64_t c, Chunk& o) {
  const Block& b = reinterpret_cast<const Block*>(row)[c / 8];
  const int64_t j = c % 8;
  uint8_t sc[8], m[8];
  unpack_k_scales(b.scales, sc, m);
  for (int i = 0; i < kQuantBlock; ++i) {
    int q = b.qs[32 * (j / 2) + i] >> (4 * (j % 2)) & 15;
    if constexpr (requires { b.qh; }) q |= (b.qh[i] >> j & 1) << 4;
    o.w[i] = q;
  }
  o.ws[0] = o.ws[1] = f16_to_f32_table()[b.d] * static_cast<float>(sc[j]);
  o.mc = -(f16_to_f32_table()[b.dmin] * static_cast<float>(m[j]));
}

void decode_q6_K(const char* row, int64_t c, Chunk& o) {
  const BlockQ6_K& b = reinterpret_cast<const BlockQ6_K*>(row)[c / 8];
  const int64_t h = (c % 8) / 4, t = c % 4;
  for (int i = 0; i < kQuantBlock; ++i) {
    const int lo = b.ql[64 * h + 32 * (t & 1) + i] >> (4 * (t >> 1)) & 15;
    const int hi = b.qh[32 * h + i] >> (2 * t) & 3;
    o.w[i] = (lo | hi << 4) - 32;
  }
  for (int half = 0; half < 2; ++half)
    o.ws[half] = f16_to_f32_table()[b.d] * static_cast<float>(b.scales[8 * h + 2 * t + half]);
}

void decode_iq4_nl(const char* row, int64_t c, Chunk& o) {
  const BlockIQ4_NL& b = reinterpret_cast<const BlockIQ4_NL*>(row)[c];
  for (int i = 0; i < kQuantBlock / 2; ++i) {
    o.w[i] = kIq4nlValues[b.qs[i] & 15];
    o.w[i + 16] = kIq4nlValues[b.qs[i] >> 4];
  }
  o.ws[0] = o.ws[1] = f16_to_f32_table()[b.d];
}

// q2_K / q3_K: chunk c is quarter t of half h of super-block c / 8, with the scales of sub-blocks 8h + 2t and +1.
void decode_q2_K(const char* row, int64_t c, Chunk& o) {
  const BlockQ2_K& b = reinterpret_cast<const BlockQ2_K*>(row)[c / 8];
  const int64_t h = (c % 8) / 4, t = c % 4;
  for (int i = 0; i < kQuantBlock; ++i) o.w[i] = b.qs[32 * h + i] >> (2 * t) & 3;
  for (int half = 0; half < 2; ++half) {
    const uint8_t sc = b.scales[8 * h + 2 * t + half];
    o.ws[half] = f16_to_f32_table()[b.d] * static_cast<float>(sc & 15);
    o.mc_half[half] = -(f16_to_f32_table()[b.dmin] * static_cast<float>(sc >> 4));
  }
}

void decode_q3_K(const char* row, int64_t c, Chunk& o) {
  const BlockQ3_K& b = reinterpret_cast<const BlockQ3_K*>(row)[c / 8];
  const int64_t h = (c % 8) / 4, t = c % 4;
  for (int i = 0; i < kQuantBlock; ++i)
    o.w[i] = ((b.qs[32 * h + i] >> (2 * t) & 3) | (b.hmask[i] >> (4 * h + t) & 1) << 2) - 4;
  for (int half = 0; half < 2; ++half) {
    const int sub_block = static_cast<int>(8 * h + 2 * t) + half;
    o.ws[half] = f16_to_f32_table()[b.d] * static_cast<float>(q3_k_scale(b.scales, sub_block) - 32);
  }
}

template <DType T, void (*Decode)(const char*, int64_t, Chunk&)>
void mv_quant(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t nc = k / kQuantBlock;
  thread_local std::vector<ActChunk> act;
  act.resize(static_cast<size_t>(nc));
  for (int64_t c = 0; c < nc; ++c) {
    ActChunk& a = act[static_cast<size_t>(c)];
    quantize_activation_chunk(x + c * kQuantBlock, a.q, a.d, a.sum);
    a.half[0] = a.half[1] = 0;
    for (int i = 0; i < kQuantBlock; ++i) a.half[i / 16] += a.q[i];
  }
  const int64_t row_bytes = storage_bytes(T, k);
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = static_cast<const char*>(w) + r * row_bytes;
    float s = 0;
    Chunk ch;
    for (int64_t c = 0; c < nc; ++c) {
      const ActChunk& a = act[static_cast<size_t>(c)];
      ch.mc = ch.mc_half[0] = ch.mc_half[1] = 0;
      Decode(row, c, ch);
      int32_t lo = 0, hi = 0;
      for (int i = 0; i < 16; ++i) lo += ch.w[i] * a.q[i];
      for (int i = 16; i < 32; ++i) hi += ch.w[i] * a.q[i];
      s += (ch.ws[0] * a.d) * static_cast<float>(lo) + (ch.ws[1] * a.d) * static_cast<float>(hi) +
           ch.mc * (a.d * static_cast<float>(a.sum)) + ch.mc_half[0] * (a.d * static_cast<float>(a.half[0])) +
           ch.mc_half[1] * (a.d * static_cast<float>(a.half[1]));
    }
    y[r] = s;
  }
}

constexpr MatvecFn mv_q8_0 = mv_quant<DType::q8_0, decode_q8_0>;
constexpr MatvecFn mv_q4_0 = mv_quant<DType::q4_0, decode_q4<BlockQ4_0>>;
constexpr MatvecFn mv_q4_1 = mv_quant<DType::q4_1, decode_q4<BlockQ4_1>>;
constexpr MatvecFn mv_q5_0 = mv_quant<DType::q5_0, decode_q4<BlockQ5_0>>;
constexpr MatvecFn mv_q5_1 = mv_quant<DType::q5_1, decode_q4<BlockQ5_1>>;
constexpr MatvecFn mv_q4_K = mv_quant<DType::q4_K, decode_q45_K<BlockQ4_K>>;
constexpr MatvecFn mv_q5_K = mv_quant<DType::q5_K, decode_q45_K<BlockQ5_K>>;
constexpr MatvecFn mv_q6_K = mv_quant<DType::q6_K, decode_q6_K>;
constexpr MatvecFn mv_q2_K = mv_quant<DType::q2_K, decode_q2_K>;
constexpr MatvecFn mv_q3_K = mv_quant<DType::q3_K, decode_q3_K>;
constexpr MatvecFn mv_iq4_nl = mv_quant<DType::iq4_nl, decode_iq4_nl>;

// Interleaved rows (kernels/interleaved_rows.hpp): each row back to its plain blocks, then the plain kernel.
template <DType T, MatvecFn Plain>
void mv_interleaved(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  thread_local std::vector<uint8_t> row;
  row.resize(static_cast<size_t>(storage_bytes(T, k)));
  for (int64_t r = r0; r < r1; ++r) {
    deinterleave_blocks(T, w, k, r, 0, k / block_elems(T), row.data());
    Plain(row.data(), k, x, y + r, 0, 1);
  }
}
constexpr MatvecFn mv_q4_0_r16 = mv_interleaved<DType::q4_0_r16, mv_q4_0>;
constexpr MatvecFn mv_q8_0_r16 = mv_interleaved<DType::q8_0_r16, mv_q8_0>;
constexpr MatvecFn mv_q4_K_r16 = mv_interleaved<DType::q4_K_r16, mv_q4_K>;
constexpr MatvecFn mv_q4_1_r16 = mv_interleaved<DType::q4_1_r16, mv_q4_1>;
constexpr MatvecFn mv_q5_K_r16 = mv_interleaved<DType::q5_K_r16, mv_q5_K>;
constexpr MatvecFn mv_q6_K_r16 = mv_interleaved<DType::q6_K_r16, mv_q6_K>;
constexpr MatvecFn mv_q2_K_r16 = mv_interleaved<DType::q2_K_r16, mv_q2_K>;
constexpr MatvecFn mv_q3_K_r16 = mv_interleaved<DType::q3_K_r16, mv_q3_K>;
constexpr MatvecFn mv_iq4_nl_r16 = mv_interleaved<DType::iq4_nl_r16, mv_iq4_nl>;

// The reference for several activation rows: one pass over the weights per row.
template <MatvecFn F>
void rows(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t i = 0; i < m; ++i) F(w, k, x + i * k, y + i * ldy, r0, r1);
}

template <DType T>
void dequant(const void* src, float* dst, int64_t n) {
  to_f32(T, src, dst, n);
}

// One row at a time to f32, then written down its panel column.
template <DType T>
void pack(const void* w, int64_t k, int64_t rows, float* out) {
  const int64_t depth = panel_depth(k), row_bytes = storage_bytes(T, k);
  std::fill(out, out + packed_floats(k, rows), 0.f);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    to_f32(T, static_cast<const char*>(w) + r * row_bytes, row.data(), k);
    float* col = out + r / kPanelRows * kPanelRows * depth + r % kPanelRows;
    for (int64_t kk = 0; kk < k; ++kk) col[kk * kPanelRows] = row[static_cast<size_t>(kk)];
  }
}

// A plain dtype's kernels: its matrix-vector kernel, the reference for several rows, its conversions.
template <DType T, MatvecFn F>
void add(MatvecKernels& s) {
  s.set(T, F, rows<F>);
  s.set_conversions(T, dequant<T>, pack<T>);
}

}  // namespace

const MatvecKernels& scalar_matvec_kernels() {
  static const MatvecKernels k = [] {
    MatvecKernels s{.isa = "scalar"};
    add<DType::f32, mv_f32>(s);
    add<DType::f16, mv_f16>(s);
    add<DType::bf16, mv_bf16>(s);
    add<DType::q8_0, mv_q8_0>(s);
    add<DType::q4_0, mv_q4_0>(s);
    add<DType::q4_1, mv_q4_1>(s);
    add<DType::q5_0, mv_q5_0>(s);
    add<DType::q5_1, mv_q5_1>(s);
    add<DType::q4_K, mv_q4_K>(s);
    add<DType::q5_K, mv_q5_K>(s);
    add<DType::q6_K, mv_q6_K>(s);
    add<DType::q2_K, mv_q2_K>(s);
    add<DType::q3_K, mv_q3_K>(s);
    add<DType::iq4_nl, mv_iq4_nl>(s);
    s.set(DType::q4_0_r16, mv_q4_0_r16, rows<mv_q4_0_r16>);
    s.set(DType::q8_0_r16, mv_q8_0_r16, rows<mv_q8_0_r16>);
    s.set(DType::q4_1_r16, mv_q4_1_r16, rows<mv_q4_1_r16>);
    s.set(DType::q4_K_r16, mv_q4_K_r16, rows<mv_q4_K_r16>);
    s.set(DType::q5_K_r16, mv_q5_K_r16, rows<mv_q5_K_r16>);
    s.set(DType::q6_K_r16, mv_q6_K_r16, rows<mv_q6_K_r16>);
    s.set(DType::q2_K_r16, mv_q2_K_r16, rows<mv_q2_K_r16>);
    s.set(DType::q3_K_r16, mv_q3_K_r16, rows<mv_q3_K_r16>);
    s.set(DType::iq4_nl_r16, mv_iq4_nl_r16, rows<mv_iq4_nl_r16>);
    return s;
  }();
  return k;
}

}  // namespace corolla
