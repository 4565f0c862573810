// A GEMM of our own for CPUs where oneDNN has no kernel that reads weights packed ahead of time (AVX2 without
// AVX-512): y[m, rows] = x[m, k] · wᵀ with w already in the f32 panels a PackFn writes (matvec.hpp). Converting a
// tile of weights straight into the layout the kernel reads means one pass over it, where handing plain f32 rows
// to oneDNN's strided GEMM cost two (our conversion, then its own copy into its layout) plus a copy of all of x on
// every call. x is packed once per product (pack_x) and shared by every thread and weight that multiplies it.
#pragma once

#include <cstdint>

namespace corolla {

struct PanelGemmKernels {
  // Rows of x per packed group: pack_x's row ranges start on multiples of it.
  int64_t x_group_rows;
  // Floats the packed form of x [m, k] takes.
  int64_t (*packed_x_floats)(int64_t m, int64_t k);
  // Rows [row_begin, row_end) of x [m, k] into their place in the packed form `out` (row_begin a multiple of
  // x_group_rows, row_end one too or m), so that ranges can be packed by different threads.
  void (*pack_x)(const float* x, int64_t m, int64_t k, float* out, int64_t row_begin, int64_t row_end);
  // y[i * ldy + r] = sum over kk of x[i, kk] · w[r, kk] for i < m, r < rows: x packed by pack_x, w as `rows`
  // rows packed by a PackFn. Writes nothing past column `rows`. It reads the panels once per 256 values of k
  // and per 144 rows of x: callers pass tiles of about 128 rows so that they stay in L2.
  void (*multiply)(const float* packed_x, int64_t m, int64_t k, const float* panels, int64_t rows, float* y,
                   int64_t ldy);
};

#if defined(COROLLA_HAVE_X86_KERNELS)
// Compiled with AVX2 + FMA flags: call it only on a CPU that runs them (the avx2 MatvecKernels set points to it).
const PanelGemmKernels& avx2_panel_gemm();
#endif

}  // namespace corolla
