// The AVX2 + FMA GEMM on weight panels (panel_gemm.hpp). This file alone is compiled with AVX2 flags; like
// matvec_avx2.cpp it has internal linkage throughout and calls no inline function of a header shared with the
// portable code.
//
// The usual register-blocked scheme: a micro-kernel keeps a 6 x 16 block of y in 12 accumulators and, for each
// value of k, multiplies 6 broadcast values of x by two vectors of a weight panel (16 weight rows side by side).
// Around it, x goes in blocks of kRowBlock rows and k in blocks of kDepthBlock values: a block of packed x
// (144 KB) stays in a core's L2 while the micro-kernel reads the slice of its 16 weight rows (16 KB) from L1,
// and the rows of y a block of x writes (72 KB for 128 weight rows) stay in L2 from one depth block to the next;
// the micro-kernel prefetches its 6 rows of y before it starts, so adding to them costs no wait.
// Measured on a 2-core AMD EPYC (Zen 3) VM, 2 threads, bf16 weights packed per 128-row tile as cpu_gemm does,
// against oneDNN's f32 matmul on weights it packed once (OpenMP threads passive, 8 alternations, TinyLlama's
// 512-token shapes): 0.94 / 0.99 of it; without the prefetch of y 0.88 / 0.92; depth blocks of 512 with row
// blocks of 96 0.98 / 0.97, of 128 with 288 0.94 / 0.94; the k loop unrolled 4 times 0.97 / 0.99.
#include <immintrin.h>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/panel_gemm.hpp"

namespace corolla {
namespace {

constexpr int64_t kRows = 6;         // rows of x per micro-kernel
constexpr int64_t kCols = 16;        // weight rows per micro-kernel
constexpr int64_t kPanel = kPanelRows;  // weight rows per panel: the stride, in floats, from one k to the next
constexpr int64_t kDepthBlock = 256;
constexpr int64_t kRowBlock = 144;   // a multiple of kRows

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t groups_of(int64_t m) { return (m + kRows - 1) / kRows; }
inline int64_t depth_of(int64_t k) { return (k + 15) / 16 * 16; }  // panel depth, as matvec.hpp's panel_depth

// Packed x: for each block of kDepthBlock values of k, the groups of kRows rows one after the other, each as
// [kc][kRows] (zeros for rows past m), so the micro-kernel reads its x in one forward stream.
int64_t packed_x_floats(int64_t m, int64_t k) { return groups_of(m) * kRows * k; }

void pack_x(const float* x, int64_t m, int64_t k, float* out, int64_t row_begin, int64_t row_end) {
  const int64_t groups = groups_of(m);
  for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
    const int64_t kc = min64(kDepthBlock, k - k0);
    float* block = out + k0 * groups * kRows;
    for (int64_t g = row_begin / kRows; g * kRows < row_end; ++g) {
      float* dst = block + g * kc * kRows;
      const int64_t live = min64(kRows, m - g * kRows);
      const float* src = x + g * kRows * k + k0;
      int64_t kk = 0;
      if (live == kRows) {
        // 8 values of each of the 6 rows -> 8 groups of 6: a transpose through two 8x8 halves in memory.
        for (; kk + 8 <= kc; kk += 8) {
          alignas(32) float t[kRows][8];
          for (int i = 0; i < kRows; ++i) _mm256_store_ps(t[i], _mm256_loadu_ps(src + i * k + kk));
          for (int j = 0; j < 8; ++j)
            for (int i = 0; i < kRows; ++i) dst[(kk + j) * kRows + i] = t[i][j];
        }
      }
      for (; kk < kc; ++kk)
        for (int64_t i = 0; i < kRows; ++i) dst[kk * kRows + i] = i < live ? src[i * k + kk] : 0.f;
    }
  }
}

// c[R rows, 16] (+)= a[kc][kRows] (first R rows) · b[kc][16], b's rows kPanel floats apart.
// The loops over R are unrolled by hand-placed pragmas: at -O2 GCC would otherwise keep the accumulators in
// memory and store them on every step (half the speed).
template <int R>
inline void micro_kernel(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, bool accumulate) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
    lo[i] = _mm256_setzero_ps();
    hi[i] = _mm256_setzero_ps();
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 b0 = _mm256_loadu_ps(b + kk * kPanel), b1 = _mm256_loadu_ps(b + kk * kPanel + 8);
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + kk * kRows + i);
      lo[i] = _mm256_fmadd_ps(ai, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(ai, b1, hi[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      lo[i] = _mm256_add_ps(lo[i], _mm256_loadu_ps(ci));
      hi[i] = _mm256_add_ps(hi[i], _mm256_loadu_ps(ci + 8));
    }
    _mm256_storeu_ps(ci, lo[i]);
    _mm256_storeu_ps(ci + 8, hi[i]);
  }
}

template <int R>
void block_of(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, bool accumulate, int64_t cols) {
  if (cols == kCols) {
    micro_kernel<R>(a, b, kc, c, ldc, accumulate);
    return;
  }
  // A short last group of weight rows: through a full-width scratch block, so that nothing past `cols` is written
  // (those columns of y belong to the next tile, maybe another thread's).
  float t[R * kCols] = {};
  for (int i = 0; i < R; ++i)
    for (int64_t j = 0; j < cols; ++j) t[i * kCols + j] = accumulate ? c[i * ldc + j] : 0.f;
  micro_kernel<R>(a, b, kc, t, kCols, accumulate);
  for (int i = 0; i < R; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = t[i * kCols + j];
}

void multiply(const float* xp, int64_t m, int64_t k, const float* panels, int64_t rows, float* y, int64_t ldy) {
  const int64_t groups = groups_of(m), depth = depth_of(k);
  for (int64_t g0 = 0; g0 < groups; g0 += kRowBlock / kRows) {
    const int64_t g1 = min64(groups, g0 + kRowBlock / kRows);
    for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
      const int64_t kc = min64(kDepthBlock, k - k0);
      const float* xblock = xp + k0 * groups * kRows;
      for (int64_t c0 = 0; c0 < rows; c0 += kCols) {
        const float* b = panels + c0 / kPanel * kPanel * depth + k0 * kPanel + c0 % kPanel;
        const int64_t cols = min64(kCols, rows - c0);
        for (int64_t g = g0; g < g1; ++g) {
          const float* a = xblock + g * kc * kRows;
          float* c = y + g * kRows * ldy + c0;
          switch (min64(kRows, m - g * kRows)) {
            case 1: block_of<1>(a, b, kc, c, ldy, k0 > 0, cols); break;
            case 2: block_of<2>(a, b, kc, c, ldy, k0 > 0, cols); break;
            case 3: block_of<3>(a, b, kc, c, ldy, k0 > 0, cols); break;
            case 4: block_of<4>(a, b, kc, c, ldy, k0 > 0, cols); break;
            case 5: block_of<5>(a, b, kc, c, ldy, k0 > 0, cols); break;
            default: block_of<6>(a, b, kc, c, ldy, k0 > 0, cols); break;
          }
        }
      }
    }
  }
}

}  // namespace

const PanelGemmKernels& avx2_panel_gemm() {
  static const PanelGemmKernels k{.x_group_rows = kRows,
                                  .packed_x_floats = packed_x_floats,
                                  .pack_x = pack_x,
                                  .multiply = multiply};
  return k;
}

}  // namespace corolla
