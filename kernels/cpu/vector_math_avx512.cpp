// AVX-512 exp-based kernels (vector_math.hpp). This file alone is compiled with AVX-512 flags; like the
// matrix-vector kernels it uses no inline function or template from a header shared with portable code.
#include <immintrin.h>

#include <math.h>  // INFINITY

#include "kernels/cpu/vector_math.hpp"

namespace corolla {
namespace {

// exp(x) as 2^n · e^r with n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts so r is
// exact), e^r by Cephes' degree-7 polynomial (expf's), 2^n applied by scalef, which also underflows to 0 and
// overflows to inf. x is clamped first so that -inf gives 0 rather than NaN; a NaN stays NaN.
inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

void softmax_row(float* p, int64_t n) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    vmax = _mm512_mask_max_ps(vmax, m, vmax, _mm512_maskz_loadu_ps(m, p + i));
  }
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p + i), mx));
    _mm512_mask_storeu_ps(p + i, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.f / _mm512_reduce_add_ps(sum));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(p + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + i), inv));
  }
}

void silu_mul(const float* g, const float* u, float* o, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
    _mm512_mask_storeu_ps(o + i, m, _mm512_mul_ps(s, uv));
  }
}

void exp_shifted(const float* x, float shift, float* out, int64_t n) {
  const __m512 s = _mm512_set1_ps(shift);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
  }
}

}  // namespace

const VectorKernels& avx512_vector_kernels() {
  static const VectorKernels k{
      .isa = "avx512", .softmax_row = softmax_row, .silu_mul = silu_mul, .exp_shifted = exp_shifted};
  return k;
}

}  // namespace corolla
