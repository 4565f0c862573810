// Matrix-vector products for single-token decode: y[r] = dot(w[r, :], x) for rows r in [row_begin, row_end).
// They read weights in their stored dtype (every weight dtype of dtype.hpp) and never convert them up front:
// decode is bound by memory bandwidth, so the weight bytes read per token are what counts.
//
// Plain weights (f32, f16, bf16) multiply f32 activations, accumulating in f32. Quantized weights multiply the
// activations rounded to 8 bits, as llama.cpp does (the rule: activation_rounding.hpp): each chunk of 32 values of
// x becomes int8 levels with one f32 scale, once per product, and each chunk's product is an exact integer dot
// product of those levels with the weights' integer levels, scaled by both scales in f32. The integer products are what
// lets the SIMD kernels keep up with memory (VNNI's vpdpbusd, AVX2's vpmaddubsw); the rounding costs under 1 % of
// a dot product's sum of |w x| (tests/unit/test_matvec.cpp bounds it). Every kernel set computes the same function,
// so the SIMD kernels agree with the scalar ones to f32 rounding, and a row of x gets the same arithmetic whatever
// the number of rows in the call.
#pragma once

#include <array>
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

// The interleaved integer kernels (kernels/interleaved_rows.hpp) read activations prepared once for a whole
// product: each chunk of 32 values of x rounded to int8 with its scale and sums, kPreparedChunkBytes per chunk
// (the layout: matvec_simd.hpp). A product split over threads prepares x once and every thread's rows read it,
// rather than each range of rows rounding all of x again. PrepareFn writes m rows (k a multiple of 32) to out,
// prepared_bytes(m, k) bytes; MatvecPreparedFn is MatvecRowsFn over them. A dtype's prepare function depends only
// on how its kernels read the activations, so weights of dtypes that share one share the prepared x.
inline constexpr int64_t kPreparedChunkBytes = 64;
inline int64_t prepared_bytes(int64_t m, int64_t k) { return m * (k / 32) * kPreparedChunkBytes; }
using PrepareFn = void (*)(const float* x, int64_t m, int64_t k, char* out);
using MatvecPreparedFn = void (*)(const void* w, int64_t k, const char* xp, int64_t m, float* y, int64_t ldy,
                                  int64_t row_begin, int64_t row_end);
// A kernel whose prepared activations are laid out otherwise (the AMX set's tiles: matvec_amx.cpp) says how many
// bytes m rows take; rows are then prepared in groups of `prepared_row_group`, and the bytes of g whole groups are
// g times those of one.
using PreparedSizeFn = int64_t (*)(int64_t m, int64_t k);

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

// One weight dtype's kernels in a set (null where the set has none).
struct DTypeKernels {
  MatvecFn one_row{};
  MatvecRowsFn rows{};
  PrepareFn prepare{};  // with `prepared`: the kernels that read prepared activations (interleaved dtypes)
  MatvecPreparedFn prepared{};
  PreparedSizeFn prepared_size{};  // null: prepared_bytes
  int64_t prepared_row_group = 1;
  int64_t prepared_min_rows = 1;  // fewer rows of x take `one_row` / `rows` instead
  // Bytes of m rows of x prepared for `prepared`.
  int64_t prepared_bytes_for(int64_t m, int64_t k) const {
    return prepared_size ? prepared_size(m, k) : prepared_bytes(m, k);
  }
  DequantFn to_f32{};  // plain dtypes only (the GEMM path's conversion)
  PackFn pack{};
  // (a plain dtype) The set reads it faster with rows interleaved by 16 (kernels/interleaved_rows.hpp), so the CPU
  // backend places it that way (weight_placement.hpp).
  bool reads_interleaved = false;
};

struct MatvecKernels {
  const char* isa;  // "scalar", "avx2", "avx512", "avx512vnni", "avx512amx"
  std::array<DTypeKernels, kDTypeCount> by_dtype{};
  // Each throws std::invalid_argument naming the dtype when the set has no such kernel.
  MatvecFn for_dtype(DType t) const;
  MatvecRowsFn rows_for_dtype(DType t) const;
  DequantFn dequant_for_dtype(DType t) const;
  PackFn pack_for_dtype(DType t) const;
  void set(DType t, MatvecFn one_row, MatvecRowsFn rows);  // the matrix-vector kernels of a weight dtype
  void set_conversions(DType t, DequantFn to_f32, PackFn pack);
  // Kernels of a plain dtype that read activations prepared in a layout of their own, from min_rows rows of x (after
  // set(), which clears them).
  void set_prepared(DType t, PrepareFn prepare, MatvecPreparedFn prepared, PreparedSizeFn size, int64_t row_group,
                    int64_t min_rows);
  // Kernels of its own for `plain` with rows interleaved by 16 (interleaved_form(plain)), which the set then reads
  // rather than plain rows. Every set computes the interleaved dtypes (the scalar set through each row's plain
  // blocks); the conversions take plain dtypes only. The SIMD sets' kernels read prepared activations.
  void set_interleaved(DType plain, MatvecFn one_row, MatvecRowsFn rows, PrepareFn prepare = nullptr,
                       MatvecPreparedFn prepared = nullptr);
  bool reads_interleaved(DType plain) const { return by_dtype[static_cast<size_t>(plain)].reads_interleaved; }
};

const MatvecKernels& scalar_matvec_kernels();
#if defined(COROLLA_HAVE_X86_KERNELS)
// Compiled with their own ISA flags: call them only on a CPU that runs them (see available_matvec_kernels()).
const MatvecKernels& avx2_matvec_kernels();        // AVX2 + FMA + F16C
const MatvecKernels& avx512_matvec_kernels();      // AVX-512 F/BW/VL (plus the AVX2 set); quantized: AVX2's
const MatvecKernels& avx512vnni_matvec_kernels();  // the AVX-512 set with VNNI's integer dot products
const MatvecKernels& amx_matvec_kernels();         // the VNNI set with bf16 weights on AMX tiles (matvec_amx.cpp)
// Sets the quantized weights' matrix-vector kernels of `set` to the AVX2 integer ones (matvec_avx2_int8.cpp).
void use_avx2_integer_dot_products(MatvecKernels& set);
#endif

// f16 -> f32 for all 65536 halves (256 KiB, built on first use). The SIMD kernels read the scales of quantized
// blocks through it: a table load is cheaper than converting one half at a time in vector registers.
const float* f16_to_f32_table();

// Every kernel set this CPU runs, scalar first, best last (ignores COROLLA_ISA).
std::vector<const MatvecKernels*> available_matvec_kernels();
// The best set this CPU runs at or below `cap` ("scalar", "avx2", "avx512", "avx512vnni", "avx512amx"; null or
// empty: no cap).
// An unknown cap is reported on stderr and ignored.
const MatvecKernels& pick_matvec_kernels(const char* cap);
// The best kernels this CPU runs (checked once at run time). COROLLA_ISA=scalar|avx2|avx512|avx512vnni|avx512amx caps
// the choice.
const MatvecKernels& best_matvec_kernels();

}  // namespace corolla
