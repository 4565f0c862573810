#include "kernels/cpu/attention_backward.hpp"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/vector_math.hpp"

extern "C" void omp_set_num_threads(int);

namespace corolla {
namespace {

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw std::runtime_error("attention_backward: oneDNN sgemm failed");
}

}  // namespace

void cpu_attention_backward(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                            const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv) {
  const float scale = spec.scale;
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), hd = q.dim(3), hkv = k.dim(2), group = hq / hkv;
  const int64_t qrow = hq * hd, kvrow = hkv * hd;  // strides between tokens
  const auto softmax = best_vector_kernels().softmax_row;
  const float* pq = q.data_as<const float>();
  const float* pk = k.data_as<const float>();
  const float* pv = v.data_as<const float>();
  const float* pdo = d_out.data_as<const float>();
  float* pdq = dq.data_as<float>();
  float* pdk = dk.data_as<float>();
  float* pdv = dv.data_as<float>();
  pool.parallel_for(b * hkv, 1, [&](int64_t w0, int64_t w1) {
    omp_set_num_threads(1);  // oneDNN computes in this thread only
    thread_local std::vector<float> p, dp, dcap;
    p.resize(static_cast<size_t>(t * t));
    dp.resize(static_cast<size_t>(t * t));
    if (spec.softcap > 0.0f) dcap.resize(static_cast<size_t>(t * t));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t bi = w / hkv, g = w % hkv;
      const float* k0 = pk + bi * t * kvrow + g * hd;
      const float* v0 = pv + bi * t * kvrow + g * hd;
      float* dk0 = pdk + bi * t * kvrow + g * hd;
      float* dv0 = pdv + bi * t * kvrow + g * hd;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const float* q0 = pq + bi * t * qrow + h * hd;
        const float* do0 = pdo + bi * t * qrow + h * hd;
        float* dq0 = pdq + bi * t * qrow + h * hd;
        const float beta = h == g * group ? 0.f : 1.f;  // the group's first head overwrites dK, dV
        const float slope = spec.alibi_slope(h);
        // P = softmax(cap(scale · Q Kᵀ) + ALiBi) with the causal mask (and window), recomputed as the forward does;
        // with a soft cap c, dcap keeps its derivative 1 − tanh²(s / c) at each score s.
        sgemm('N', 'T', t, t, hd, scale, q0, qrow, k0, kvrow, 0.f, p.data(), t);
        for (int64_t i = 0; i < t; ++i) {
          float* row = p.data() + i * t;
          const int64_t first = spec.first_slot(i);
          if (spec.softcap > 0.0f)
            for (int64_t j = first; j <= i; ++j) {
              const float th = std::tanh(row[j] / spec.softcap);
              dcap[static_cast<size_t>(i * t + j)] = 1.f - th * th;
              row[j] = spec.capped(row[j]);
            }
          if (slope != 0.0f)
            for (int64_t j = first; j <= i; ++j) row[j] += slope * static_cast<float>(j);  // ALiBi: a constant bias
          std::fill(row, row + first, 0.f);
          softmax(row + first, i + 1 - first);
          std::fill(row + i + 1, row + t, 0.f);
        }
        // dV += Pᵀ dO; dP = dO Vᵀ
        sgemm('T', 'N', t, hd, t, 1.f, p.data(), t, do0, qrow, beta, dv0, kvrow);
        sgemm('N', 'T', t, t, hd, 1.f, do0, qrow, v0, kvrow, 0.f, dp.data(), t);
        // dS = P ∘ (dP − rowsum(dP ∘ P)), through the cap's derivative where there is one, kept in dp (masked
        // entries are 0 because P is).
        for (int64_t i = 0; i < t; ++i) {
          float* pr = p.data() + i * t;
          float* dr = dp.data() + i * t;
          const float sum = dot(pr, dr, i + 1);  // P is 0 before the window
          for (int64_t j = 0; j <= i; ++j) dr[j] = pr[j] * (dr[j] - sum);
          if (spec.softcap > 0.0f)
            for (int64_t j = spec.first_slot(i); j <= i; ++j) dr[j] *= dcap[static_cast<size_t>(i * t + j)];
          std::fill(dr + i + 1, dr + t, 0.f);
        }
        // dQ = scale · dS K; dK += scale · dSᵀ Q
        sgemm('N', 'N', t, hd, t, scale, dp.data(), t, k0, kvrow, 0.f, dq0, qrow);
        sgemm('T', 'N', t, hd, t, scale, dp.data(), t, q0, qrow, beta, dk0, kvrow);
      }
    }
  });
}

}  // namespace corolla
