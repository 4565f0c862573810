// Portable reference kernels: the correctness baseline for the SIMD ones and the fallback for old CPUs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/matvec.hpp"

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

void mv_q8_0(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(w) + r * nb;
    float s = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float* xb = x + i * kQuantBlock;
      float acc = 0;
      for (int j = 0; j < kQuantBlock; ++j) acc += b[i].qs[j] * xb[j];
      s += f16_to_f32(b[i].d) * acc;
    }
    y[r] = s;
  }
}

void mv_q4_0(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const BlockQ4_0* b = static_cast<const BlockQ4_0*>(w) + r * nb;
    float s = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float* xb = x + i * kQuantBlock;
      float acc = 0;
      for (int j = 0; j < kQuantBlock / 2; ++j)
        acc += ((b[i].qs[j] & 0x0f) - 8) * xb[j] + ((b[i].qs[j] >> 4) - 8) * xb[j + kQuantBlock / 2];
      s += f16_to_f32(b[i].d) * acc;
    }
    y[r] = s;
  }
}

void mv_q4_1(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const BlockQ4_1* b = static_cast<const BlockQ4_1*>(w) + r * nb;
    float s = 0;
    for (int64_t i = 0; i < nb; ++i) {
      const float* xb = x + i * kQuantBlock;
      float acc = 0, xsum = 0;
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        acc += (b[i].qs[j] & 0x0f) * xb[j] + (b[i].qs[j] >> 4) * xb[j + kQuantBlock / 2];
        xsum += xb[j] + xb[j + kQuantBlock / 2];
      }
      s += f16_to_f32(b[i].d) * acc + f16_to_f32(b[i].m) * xsum;
    }
    y[r] = s;
  }
}

// q5_0, q5_1 and the K-quants: each block (32 or 256 values) is dequantized as to_f32() does, then multiplied in
// f32.
template <DType T>
void mv_blocks(const void* w, int64_t k, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t n = block_elems(T), nb = k / n, bytes = block_bytes(T);
  float v[kSuperBlock];
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = static_cast<const char*>(w) + r * nb * bytes;
    float s = 0;
    for (int64_t i = 0; i < nb; ++i) {
      to_f32(T, row + i * bytes, v, n);
      s += dot8(n, x + i * n, [&v](int64_t j) { return v[j]; });
    }
    y[r] = s;
  }
}

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

}  // namespace

const MatvecKernels& scalar_matvec_kernels() {
  static const MatvecKernels k{.isa = "scalar",
                               .f32 = mv_f32,
                               .f16 = mv_f16,
                               .bf16 = mv_bf16,
                               .q8_0 = mv_q8_0,
                               .q4_0 = mv_q4_0,
                               .q4_1 = mv_q4_1,
                               .q5_0 = mv_blocks<DType::q5_0>,
                               .q5_1 = mv_blocks<DType::q5_1>,
                               .q4_K = mv_blocks<DType::q4_K>,
                               .q5_K = mv_blocks<DType::q5_K>,
                               .q6_K = mv_blocks<DType::q6_K>,
                               .f32_rows = rows<mv_f32>,
                               .f16_rows = rows<mv_f16>,
                               .bf16_rows = rows<mv_bf16>,
                               .q8_0_rows = rows<mv_q8_0>,
                               .q4_0_rows = rows<mv_q4_0>,
                               .q4_1_rows = rows<mv_q4_1>,
                               .q5_0_rows = rows<mv_blocks<DType::q5_0>>,
                               .q5_1_rows = rows<mv_blocks<DType::q5_1>>,
                               .q4_K_rows = rows<mv_blocks<DType::q4_K>>,
                               .q5_K_rows = rows<mv_blocks<DType::q5_K>>,
                               .q6_K_rows = rows<mv_blocks<DType::q6_K>>,
                               .f16_to_f32 = dequant<DType::f16>,
                               .bf16_to_f32 = dequant<DType::bf16>,
                               .q8_0_to_f32 = dequant<DType::q8_0>,
                               .q4_0_to_f32 = dequant<DType::q4_0>,
                               .q4_1_to_f32 = dequant<DType::q4_1>,
                               .q5_0_to_f32 = dequant<DType::q5_0>,
                               .q5_1_to_f32 = dequant<DType::q5_1>,
                               .q4_K_to_f32 = dequant<DType::q4_K>,
                               .q5_K_to_f32 = dequant<DType::q5_K>,
                               .q6_K_to_f32 = dequant<DType::q6_K>,
                               .f32_pack = pack<DType::f32>,
                               .f16_pack = pack<DType::f16>,
                               .bf16_pack = pack<DType::bf16>,
                               .q8_0_pack = pack<DType::q8_0>,
                               .q4_0_pack = pack<DType::q4_0>,
                               .q4_1_pack = pack<DType::q4_1>,
                               .q5_0_pack = pack<DType::q5_0>,
                               .q5_1_pack = pack<DType::q5_1>,
                               .q4_K_pack = pack<DType::q4_K>,
                               .q5_K_pack = pack<DType::q5_K>,
                               .q6_K_pack = pack<DType::q6_K>};
  return k;
}

}  // namespace corolla
