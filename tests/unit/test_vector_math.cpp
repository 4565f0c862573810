// The exp-based kernels of every instruction set this CPU runs (softmax rows, SiLU gate, shifted exp) against double
// precision, including the ends of exp's range, -inf (a masked score) and vector tails.
#define BOOST_TEST_MODULE vector_math
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/vector_math.hpp"

using namespace corolla;

namespace {

std::vector<float> uniform(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

// The vector kernels follow the matrix-vector set's instruction set, including the sets that only add to another
// (avx512vnni is avx512 for them): the best matrix-vector set never leaves them scalar.
BOOST_AUTO_TEST_CASE(the_best_set_follows_the_matrix_vector_kernels) {
  const std::string matvec = best_matvec_kernels().isa, vector = best_vector_kernels().isa;
  BOOST_TEST_MESSAGE("matrix-vector " << matvec << ", vector " << vector);
  BOOST_TEST(matvec.rfind(vector, 0) == 0, matvec << " chose " << vector);
  const auto sets = available_vector_kernels();
  for (size_t i = 1; i < sets.size(); ++i) BOOST_TEST(std::string(sets[i]->isa) != sets[i - 1]->isa);
}

BOOST_AUTO_TEST_CASE(softmax_rows_match_double_precision) {
  uint32_t seed = 1;
  for (const VectorKernels* ks : available_vector_kernels())
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 513}) {
      std::vector<float> p = uniform(n, -30.f, 30.f, seed++);
      if (n > 2) p[1] = -std::numeric_limits<float>::infinity();  // a masked score gets no weight
      if (n > 3) p[2] = -200.f;                                   // far below the largest: weight 0 in f32
      const std::vector<float> in = p;
      ks->softmax_row(p.data(), n);
      double mx = -INFINITY, z = 0;
      for (float v : in) mx = std::max(mx, double(v));
      for (float v : in) z += std::exp(double(v) - mx);
      // Relative error where the weight is not negligible (p - max is rounded to f32 first: exp turns its
      // rounding, up to 60 · 2^-24 here, into a relative error of the same size), and no weight where it is.
      double worst = 0, total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(in[static_cast<size_t>(i)]) - mx) / z;
        const float got = p[static_cast<size_t>(i)];
        total += got;
        if (want > 1e-30)
          worst = std::max(worst, std::fabs(got - want) / want);
        else
          BOOST_TEST(got < 1e-37f, ks->isa << " n=" << n << " at " << i);
      }
      BOOST_TEST(worst < 1e-5, ks->isa << " n=" << n << " relative error " << worst);
      BOOST_TEST(std::fabs(total - 1) < 1e-5, ks->isa << " n=" << n);
    }
}

BOOST_AUTO_TEST_CASE(silu_mul_matches_double_precision) {
  uint32_t seed = 100;
  for (const VectorKernels* ks : available_vector_kernels())
    for (int64_t n : {1, 9, 16, 33, 1000}) {
      std::vector<float> g = uniform(n, -20.f, 20.f, seed++), u = uniform(n, -3.f, 3.f, seed++);
      if (n > 4) {  // the ends of exp's range: silu(x) -> x for large x, -> -0 for very negative x
        g[0] = 100.f;
        g[1] = -100.f;
        g[2] = 89.f;
        g[3] = -89.f;
      }
      std::vector<float> out(static_cast<size_t>(n), -7.f);
      ks->silu_mul(g.data(), u.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double x = g[static_cast<size_t>(i)], want = x / (1 + std::exp(-x)) * u[static_cast<size_t>(i)];
        const double got = out[static_cast<size_t>(i)];
        BOOST_TEST(std::fabs(got - want) <= 2e-6 * std::fabs(want) + 1e-30,
                   ks->isa << " n=" << n << " silu(" << x << ") * " << u[static_cast<size_t>(i)] << " = " << got
                           << ", want " << want);
      }
      // In place, as the backend calls it (out = gate).
      std::vector<float> in_place = g;
      ks->silu_mul(in_place.data(), u.data(), in_place.data(), n);
      BOOST_TEST(in_place == out, ks->isa << " n=" << n << " in place");
    }
}

BOOST_AUTO_TEST_CASE(exp_shifted_matches_double_precision) {
  uint32_t seed = 300;
  for (const VectorKernels* ks : available_vector_kernels())
    for (int64_t n : {1, 7, 8, 17, 1000}) {
      std::vector<float> x = uniform(n, -60.f, 5.f, seed++);
      if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // a masked logit: weight 0
      std::vector<float> out(static_cast<size_t>(n), -7.f);
      ks->exp_shifted(x.data(), 3.f, out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(double(x[static_cast<size_t>(i)] - 3.f));
        BOOST_TEST(std::fabs(out[static_cast<size_t>(i)] - want) <= 2e-6 * want + 1e-37,
                   ks->isa << " n=" << n << " exp(" << x[static_cast<size_t>(i)] << " - 3)");
      }
      std::vector<float> in_place = x;  // as the sampler may call it
      ks->exp_shifted(in_place.data(), 3.f, in_place.data(), n);
      BOOST_TEST(in_place == out, ks->isa << " n=" << n << " in place");
    }
}
