// The CPU backend's gradient operations against central finite differences of double-precision forwards (and,
// for matmul, the product with the dequantized weights), so no formula is checked against itself.
#define BOOST_TEST_MODULE cpu_backward
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <random>

#include "kernels/backend.hpp"

using namespace corolla;
namespace bdata = boost::unit_test::data;

namespace {

Backend& cpu() {
  static auto b = make_cpu_backend(2);
  return *b;
}

Tensor random_tensor(Shape s, uint32_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(DType::f32, s);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

std::vector<double> as_double(const Tensor& t) {
  const float* p = t.data_as<const float>();
  return std::vector<double>(p, p + t.numel());
}

// d(Σ dy · f(x)) / dx by central differences, f in double precision.
std::vector<double> numeric_grad(const std::function<std::vector<double>(const std::vector<double>&)>& f,
                                 std::vector<double> x, const std::vector<double>& dy) {
  std::vector<double> g(x.size());
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const auto up = f(x);
    x[i] = keep - h;
    const auto down = f(x);
    x[i] = keep;
    double s = 0;
    for (size_t j = 0; j < dy.size(); ++j) s += dy[j] * (up[j] - down[j]);
    g[i] = s / (2 * h);
  }
  return g;
}

double max_diff(const Tensor& got, const std::vector<double>& want) {
  double m = 0;
  for (size_t i = 0; i < want.size(); ++i) m = std::max(m, std::fabs(got.data_as<const float>()[i] - want[i]));
  return m;
}

const char* kWeightTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K", "q6_K"};

}  // namespace

BOOST_DATA_TEST_CASE(matmul_backward_is_dy_times_the_dequantized_weight, bdata::make(kWeightTypes), wt_name) {
  const DType wt = *parse_dtype(wt_name);
  for (int64_t m : {1, 5, 40}) {
    // k: several quantization blocks (of 32 values, 256 for the K-quants), split over threads
    const int64_t n = 48, k = block_elems(wt) == 256 ? 768 : 160;
    // As the backend holds it (q4_0 and q8_0 interleaved by rows where the kernels read that faster).
    const Tensor w = cpu().upload_weight(random_tensor({n, k}, 1).cast(wt));
    const Tensor wf = w.to_f32();
    const Tensor dy = random_tensor({m, n}, 2);
    Tensor dx = random_tensor({m, k}, 3);  // overwritten, not accumulated
    cpu().matmul_backward(dy, w, dx);
    std::vector<double> want(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c)
        for (int64_t r = 0; r < n; ++r)
          want[static_cast<size_t>(i * k + c)] +=
              double(dy.data_as<float>()[i * n + r]) * wf.data_as<float>()[r * k + c];
    BOOST_TEST(max_diff(dx, want) < 1e-4, dtype_name(w.dtype()) << " m=" << m);
  }
}

BOOST_AUTO_TEST_CASE(matmul_weight_grad_accumulates) {
  const int64_t m = 7, n = 20, k = 36;
  const Tensor dy = random_tensor({m, n}, 4), x = random_tensor({m, k}, 5);
  Tensor dw = random_tensor({n, k}, 6);
  std::vector<double> want = as_double(dw);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      for (int64_t i = 0; i < m; ++i)
        want[static_cast<size_t>(r * k + c)] += double(dy.data_as<float>()[i * n + r]) * x.data_as<float>()[i * k + c];
  cpu().matmul_weight_grad(dy, x, dw);
  BOOST_TEST(max_diff(dw, want) < 1e-4);
}

BOOST_AUTO_TEST_CASE(rms_norm_backward_matches_finite_differences) {
  const int64_t rows = 3, d = 24;
  const Tensor x = random_tensor({rows, d}, 7), w = random_tensor({d}, 8), dy = random_tensor({rows, d}, 9);
  const float eps = 1e-5f;
  auto f = [&](const std::vector<double>& xv) {
    std::vector<double> y(xv.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ms = 0;
      for (int64_t i = 0; i < d; ++i) ms += xv[r * d + i] * xv[r * d + i];
      const double inv = 1 / std::sqrt(ms / d + eps);
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = xv[r * d + i] * inv * w.data_as<float>()[i];
    }
    return y;
  };
  Tensor dx = cpu().alloc(DType::f32, {rows, d});
  cpu().rms_norm_backward(x, w, eps, dy, dx);
  BOOST_TEST(max_diff(dx, numeric_grad(f, as_double(x), as_double(dy))) < 1e-4);
}

// SwiGLU (silu_mul) and GeGLU (gelu_mul, the tanh form of Gemma 2).
BOOST_AUTO_TEST_CASE(gated_activation_backward_matches_finite_differences) {
  const int64_t n = 50;
  const Tensor g = random_tensor({n}, 10, 3.f), u = random_tensor({n}, 11), dy = random_tensor({n}, 12);
  for (const bool gelu : {false, true}) {
    BOOST_TEST_CONTEXT((gelu ? "gelu_mul" : "silu_mul")) {
      auto act = [&](double x) {
        return gelu ? 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))
                    : x / (1 + std::exp(-x));
      };
      auto f_gate = [&](const std::vector<double>& gv) {
        std::vector<double> y(gv.size());
        for (size_t i = 0; i < gv.size(); ++i) y[i] = act(gv[i]) * u.data_as<float>()[i];
        return y;
      };
      auto f_up = [&](const std::vector<double>& uv) {
        std::vector<double> y(uv.size());
        for (size_t i = 0; i < uv.size(); ++i) y[i] = act(g.data_as<float>()[i]) * uv[i];
        return y;
      };
      auto backward = [&](const Tensor& d, Tensor& dg, Tensor& du) {
        if (gelu)
          cpu().gelu_mul_backward(g, u, Gelu::tanh, d, dg, du);
        else
          cpu().silu_mul_backward(g, u, d, dg, du);
      };
      Tensor dg = cpu().alloc(DType::f32, {n}), du = cpu().alloc(DType::f32, {n});
      backward(dy, dg, du);
      BOOST_TEST(max_diff(dg, numeric_grad(f_gate, as_double(g), as_double(dy))) < 1e-4);
      BOOST_TEST(max_diff(du, numeric_grad(f_up, as_double(u), as_double(dy))) < 1e-4);
      // d_gate may be d_out itself.
      Tensor inplace = dy.clone();
      backward(inplace, inplace, du);
      BOOST_TEST(max_diff(inplace, as_double(dg)) == 0.0);
      // The forward is the same function.
      Tensor y = cpu().alloc(DType::f32, {n});
      if (gelu)
        cpu().gelu_mul(g, u, Gelu::tanh, y);
      else
        cpu().silu_mul(g, u, y);
      for (int64_t i = 0; i < n; ++i)
        BOOST_TEST(std::fabs(y.data_as<float>()[i] - act(g.data_as<float>()[i]) * u.data_as<float>()[i]) < 1e-5);
    }
  }
}

// Long sequences take the same path; 9 tokens and two query heads per KV head exercise the causal mask and the
// accumulation of dK, dV over a group; a sliding window of 4 tokens cuts every query's history from the fifth on;
// a soft cap of 1.5 (Gemma 2's attn_logit_softcapping) bends most of these scores.
BOOST_AUTO_TEST_CASE(attention_backward_matches_finite_differences) {
  for (const int64_t window : {0, 4})
    for (const float softcap : {0.f, 1.5f}) {
      BOOST_TEST_CONTEXT("window " << window << ", cap " << softcap) {
        const int64_t b = 2, t = 9, hq = 4, hkv = 2, hd = 8, group = hq / hkv;
        const float scale = 0.35f;
        const AttentionSpec spec{.scale = scale, .window = window, .softcap = softcap};
        const Tensor q = random_tensor({b, t, hq, hd}, 13), k = random_tensor({b, t, hkv, hd}, 14);
        const Tensor v = random_tensor({b, t, hkv, hd}, 15), dout = random_tensor({b, t, hq * hd}, 16);
        // out[b, t, h, :] = Σ_{s ≤ t} softmax_s(scale · q·k_s) v_s, in double.
        auto attn = [&](const std::vector<double>& qv, const std::vector<double>& kv, const std::vector<double>& vv) {
          std::vector<double> out(static_cast<size_t>(b * t * hq * hd));
          for (int64_t bi = 0; bi < b; ++bi)
            for (int64_t ti = 0; ti < t; ++ti)
              for (int64_t h = 0; h < hq; ++h) {
                const int64_t g = h / group;
                const int64_t first = spec.first_slot(ti);
                std::vector<double> p(static_cast<size_t>(ti + 1), 0.0);
                double mx = -1e300, sum = 0;
                for (int64_t s = first; s <= ti; ++s) {
                  double dotp = 0;
                  for (int64_t i = 0; i < hd; ++i)
                    dotp += qv[((bi * t + ti) * hq + h) * hd + i] * kv[((bi * t + s) * hkv + g) * hd + i];
                  p[s] = softcap > 0 ? softcap * std::tanh(dotp * scale / softcap) : dotp * scale;
                  mx = std::max(mx, p[s]);
                }
                for (int64_t s = first; s <= ti; ++s) sum += (p[s] = std::exp(p[s] - mx));
                for (int64_t s = first; s <= ti; ++s)
                  for (int64_t i = 0; i < hd; ++i)
                    out[((bi * t + ti) * hq + h) * hd + i] += p[s] / sum * vv[((bi * t + s) * hkv + g) * hd + i];
              }
          return out;
        };
        const auto qd = as_double(q), kd = as_double(k), vd = as_double(v), dd = as_double(dout);
        Tensor dq = cpu().alloc(DType::f32, q.shape()), dk = cpu().alloc(DType::f32, k.shape());
        Tensor dv = cpu().alloc(DType::f32, v.shape());
        cpu().attention_backward(q, k, v, dout, spec, dq, dk, dv);
        BOOST_TEST(max_diff(dq, numeric_grad([&](const auto& x) { return attn(x, kd, vd); }, qd, dd)) < 1e-4);
        BOOST_TEST(max_diff(dk, numeric_grad([&](const auto& x) { return attn(qd, x, vd); }, kd, dd)) < 1e-4);
        BOOST_TEST(max_diff(dv, numeric_grad([&](const auto& x) { return attn(qd, kd, x); }, vd, dd)) < 1e-4);
      }
    }
}

BOOST_AUTO_TEST_CASE(shape_mismatches_are_errors) {
  Tensor dx = cpu().alloc(DType::f32, {2, 8});
  BOOST_CHECK_THROW(cpu().matmul_backward(random_tensor({2, 5}, 1), random_tensor({4, 8}, 2), dx),
                    std::invalid_argument);
  Tensor dw = cpu().alloc(DType::f32, {4, 8});
  BOOST_CHECK_THROW(cpu().matmul_weight_grad(random_tensor({3, 4}, 1), random_tensor({2, 8}, 2), dw),
                    std::invalid_argument);
  Tensor q = random_tensor({1, 4, 3, 8}, 1), k = random_tensor({1, 4, 2, 8}, 2);
  Tensor dq = q.clone(), dk = k.clone(), dv = k.clone();
  BOOST_CHECK_THROW(cpu().attention_backward(q, k, k, q, {.scale = 1.f}, dq, dk, dv), std::invalid_argument);
}
