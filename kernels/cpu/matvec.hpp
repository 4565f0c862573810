// Matrix-vector products for single-token decode: y[r] = dot(w[r, :], x) for rows r in [row_begin, row_end).
// They read weights in their stored dtype (bf16, f16, q8_0, q4_0, q4_1, q5_0, q5_1, the K-quants q4_K / q5_K /
// q6_K, f32) and never convert them up front: decode is bound by memory bandwidth, so the weight bytes read per
// token are what counts.
//
// Plain weights (f32, f16, bf16) multiply f32 activations, accumulating in f32. Quantized weights multiply the
// activations rounded to 8 bits, as llama.cpp does (the rule: activation_rounding.hpp): each chunk of 32 values of
// x becomes int8 levels with one f32 scale, once per call, and each chunk's product is an exact integer dot product
// of those levels with the weights' integer levels, scaled by both scales in f32. The integer products are what
// lets the SIMD kernels keep up with memory (VNNI's vpdpbusd, AVX2's vpmaddubsw); the rounding costs under 1 % of
// a dot product's sum of |w x| (tests/unit/test_matvec.cpp bounds it). Every kernel set computes the same function,
// so the SIMD kernels agree with the scalar ones to f32 rounding, and a row of x gets the same arithmetic whatever
// the number of rows in the call.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dtype.hpp"

namespace corolla {

// Up to this many rows of x share one pass over the weights (small-batch decode). The kernels take more rows in
// groups of this many over L2-sized tiles of weights; when cpu_matmul switches to a GEMM is set in gemm.hpp.
inline constexpr int64_t kMatvecMaxRows = 4;

using MatvecFn = void (*)(const void* w, int64_t k, const float* x, float* y, int64_t row_begin, int64_t row_end);

// Several activation rows at once: y[i * ldy + r] = dot(w[r, :], x[i * k .. i * k + k)) for i < m and r in
// [row_begin, row_end), m >= 1. The SIMD kernels read the weights from memory once for all m rows (the scalar
// reference reads them once per row).
using MatvecRowsFn = void (*)(const void* w, int64_t k, const float* x, int64_t m, float* y, int64_t ldy,
                              int64_t row_begin, int64_t row_end);

// Weights to f32: n values (whole blocks for quantized types: 32 values, 256 for the K-quants) from src to dst, as
// to_f32() in dtype.hpp does.
// The GEMM path converts tiles of weights with it.
using DequantFn = void (*)(const void* src, float* dst, int64_t n);

// Weights to f32 GEMM panels: `rows` rows of w [*, k] become wᵀ [k, rows] in oneDNN's BA16a64b blocking, i.e.
// panels of kPanelRows rows one after the other, panel[kk * kPanelRows + r] = w[r, kk] for kk < panel_depth(k),
// zero past k and past `rows` (a short last panel is padded). The GEMM path packs each tile of weights once this
// way, so oneDNN computes straight from it rather than copying the tile into its own layout again.
using PackFn = void (*)(const void* w, int64_t k, int64_t rows, float* out);
inline constexpr int64_t kPanelRows = 64;
inline int64_t panel_depth(int64_t k) { return (k + 15) / 16 * 16; }
inline int64_t packed_floats(int64_t k, int64_t rows) {
  return (rows + kPanelRows - 1) / kPanelRows * kPanelRows * panel_depth(k);
}

struct MatvecKernels {
  const char* isa;  // "scalar", "avx2", "avx512", "avx512vnni"
  // Kernel sets may leave some for another file to fill in (see use_avx2_integer_dot_products).
  MatvecFn f32{}, f16{}, bf16{}, q8_0{}, q4_0{}, q4_1{}, q5_0{}, q5_1{}, q4_K{}, q5_K{}, q6_K{}, q4_0_r16{}, q8_0_r16{},
      q4_K_r16{}, q5_K_r16{}, q6_K_r16{}, q4_1_r16{};
  MatvecRowsFn f32_rows{}, f16_rows{}, bf16_rows{}, q8_0_rows{}, q4_0_rows{}, q4_1_rows{}, q5_0_rows{}, q5_1_rows{},
      q4_K_rows{}, q5_K_rows{}, q6_K_rows{}, q4_0_r16_rows{}, q8_0_r16_rows{}, q4_K_r16_rows{},
      q5_K_r16_rows{}, q6_K_r16_rows{}, q4_1_r16_rows{};
  // The set reads weights with interleaved rows (kernels/interleaved_rows.hpp) faster than plain ones, so the CPU
  // backend places q4_0, q8_0 and K-quant weights that way (weight_placement.hpp). Every set computes them (the scalar set
  // through each row's plain blocks); the conversions below take plain dtypes only.
  bool reads_interleaved = false;
  DequantFn f16_to_f32, bf16_to_f32, q8_0_to_f32, q4_0_to_f32, q4_1_to_f32, q5_0_to_f32, q5_1_to_f32, q4_K_to_f32,
      q5_K_to_f32, q6_K_to_f32;
  PackFn f32_pack, f16_pack, bf16_pack, q8_0_pack, q4_0_pack, q4_1_pack, q5_0_pack, q5_1_pack, q4_K_pack, q5_K_pack,
      q6_K_pack;
  MatvecFn for_dtype(DType t) const;
  void set(DType t, MatvecFn one_row, MatvecRowsFn rows);  // the matrix-vector kernels of a weight dtype
  MatvecRowsFn rows_for_dtype(DType t) const;
  DequantFn dequant_for_dtype(DType t) const;  // f32 included (a copy)
  PackFn pack_for_dtype(DType t) const;
};

const MatvecKernels& scalar_matvec_kernels();
#if defined(COROLLA_HAVE_X86_KERNELS)
// Compiled with their own ISA flags: call them only on a CPU that runs them (see available_matvec_kernels()).
const MatvecKernels& avx2_matvec_kernels();        // AVX2 + FMA + F16C
const MatvecKernels& avx512_matvec_kernels();      // AVX-512 F/BW/VL (plus the AVX2 set); quantized: AVX2's
const MatvecKernels& avx512vnni_matvec_kernels();  // the AVX-512 set with VNNI's integer dot products
// Sets the quantized weights' matrix-vector kernels of `set` to the AVX2 integer ones (matvec_avx2_int8.cpp).
void use_avx2_integer_dot_products(MatvecKernels& set);
#endif

// f16 -> f32 for all 65536 halves (256 KiB, built on first use). The SIMD kernels read the scales of quantized
// blocks through it: a table load is cheaper than converting one half at a time in vector registers.
const float* f16_to_f32_table();

// Every kernel set this CPU runs, scalar first, best last (ignores COROLLA_ISA).
std::vector<const MatvecKernels*> available_matvec_kernels();
// The best set this CPU runs at or below `cap` ("scalar", "avx2", "avx512", "avx512vnni"; null or empty: no cap).
// An unknown cap is reported on stderr and ignored.
const MatvecKernels& pick_matvec_kernels(const char* cap);
// The best kernels this CPU runs (checked once at run time). COROLLA_ISA=scalar|avx2|avx512|avx512vnni caps the choice.
const MatvecKernels& best_matvec_kernels();

}  // namespace corolla
