// AVX2 exp-based kernels (vector_math.hpp). This file alone is compiled with AVX2/FMA flags; like the
// matrix-vector kernels it uses no inline function or template from a header shared with portable code.
#include <immintrin.h>

#include <math.h>  // expf, INFINITY: C functions, not inline C++ wrappers compiled for AVX2

#include "kernels/cpu/vector_math.hpp"

namespace corolla {
namespace {

// exp(x) as 2^n · e^r, as in vector_math_avx512.cpp, with 2^n built in the exponent field: x is clamped to
// [-87.3, 88.7] (2^(n-1) stays a normal number and the product p · 2 · 2^(n-1) cannot overflow early), and lanes
// below the range are set to 0, as expf() underflows. A NaN stays NaN.
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_set1_ps(88.72283f), _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  // 2^(n-1): n in [-126, 128], so the biased exponent n - 1 + 127 lies in [0, 254].
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  const __m256 e = _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(under, e);
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void softmax_row(float* p, int64_t n) {
  const int64_t whole = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < whole; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(p + i));
  float mx = hmax(vmax);
  for (int64_t i = whole; i < n; ++i) mx = p[i] > mx ? p[i] : mx;
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p + i), vmx));
    _mm256_storeu_ps(p + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum(vsum);
  for (int64_t i = whole; i < n; ++i) sum += (p[i] = expf(p[i] - mx));
  const float inv = 1.f / sum;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int64_t i = 0; i < whole; i += 8) _mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), vinv));
  for (int64_t i = whole; i < n; ++i) p[i] *= inv;
}

void silu_mul(const float* g, const float* u, float* o, int64_t n) {
  const int64_t whole = n / 8 * 8;
  const __m256 one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
  }
  for (int64_t i = whole; i < n; ++i) o[i] = g[i] / (1.f + expf(-g[i])) * u[i];
}

void exp_shifted(const float* x, float shift, float* out, int64_t n) {
  const int64_t whole = n / 8 * 8;
  const __m256 s = _mm256_set1_ps(shift);
  for (int64_t i = 0; i < whole; i += 8) _mm256_storeu_ps(out + i, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  for (int64_t i = whole; i < n; ++i) out[i] = expf(x[i] - shift);
}

}  // namespace

const VectorKernels& avx2_vector_kernels() {
  static const VectorKernels k{
      .isa = "avx2", .softmax_row = softmax_row, .silu_mul = silu_mul, .exp_shifted = exp_shifted};
  return k;
}

}  // namespace corolla
