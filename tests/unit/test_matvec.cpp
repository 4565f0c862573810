// Matrix-vector kernels of every instruction set this CPU runs, against the scalar kernels and against a
// double-precision reference on the dequantized weights; cpu_matmul (decode and prefill paths) against a naive
// reference.
//
// "Within 1e-5 relative" is measured against the dot product's own scale, sum_i |w_i x_i|: when the terms cancel,
// |y| can be arbitrarily small while f32 rounding is not. Quantized weights multiply activations quantized to 8 bits
// (matvec.hpp): their reference quantizes x by that rule itself, and a separate check bounds what the rounding
// costs against the exact product.
#define BOOST_TEST_MODULE matvec
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/matvec.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cpu/weight_placement.hpp"
#include "kernels/interleaved_rows.hpp"
#include "kernels/tensor.hpp"
#include "support/quantized_activations.hpp"

using namespace corolla;
using corolla::test::activations_as_quantized;

namespace {

constexpr DType kWeightTypes[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,  DType::q4_0,
                                  DType::q4_1, DType::q5_0, DType::q5_1, DType::q4_K,  DType::q5_K,
                                  DType::q6_K, DType::q2_K, DType::q3_K, DType::iq4_nl};
// Weights placed with their rows interleaved by 16 (kernels/interleaved_rows.hpp); every kernel set computes them.
constexpr DType kInterleavedTypes[] = {DType::q4_0_r16, DType::q8_0_r16, DType::q4_1_r16,
                                       DType::q4_K_r16, DType::q5_K_r16, DType::q6_K_r16,
                                       DType::q2_K_r16, DType::q3_K_r16, DType::iq4_nl_r16};
constexpr double kTolerance = 1e-5;

// The matrix-vector kernels' dtypes: the weight types and the interleaved ones.
std::vector<DType> matvec_types() {
  std::vector<DType> all(std::begin(kWeightTypes), std::end(kWeightTypes));
  for (DType t : kInterleavedTypes) all.push_back(t);
  return all;
}

// n rows, rounded up to whole groups of 16 for an interleaved dtype.
int64_t rows_for(DType t, int64_t n) {
  return is_interleaved(t) ? (n + kInterleavedRows - 1) / kInterleavedRows * kInterleavedRows : n;
}

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Weights [n, k] stored as `t`, and the same weights dequantized back to f32 (what every kernel must compute with).
struct Weights {
  Tensor stored;
  std::vector<float> dequantized;
};

// An interleaved t is quantized as its plain form, then interleaved (n a multiple of 16).
Weights make_weights(DType t, int64_t n, int64_t k, uint32_t seed) {
  const std::vector<float> w = randn(n * k, seed);
  Tensor f = Tensor::empty(DType::f32, {n, k});
  std::copy(w.begin(), w.end(), f.data_as<float>());
  const DType plain = plain_form(t);
  Weights out{f.cast(plain), std::vector<float>(static_cast<size_t>(n * k))};
  to_f32(plain, out.stored.data(), out.dequantized.data(), n * k);
  if (is_interleaved(t)) {
    Tensor rows = Tensor::empty(t, {n, k});
    interleave_rows(plain, out.stored.data(), rows.data(), n, k);
    out.stored = rows;
  }
  return out;
}

// The reference: y = W x in double, and the scale sum |w_i x_i| the tolerance is relative to. With
// `quantized_x`, x as the kernels for quantized weights see it.
void reference(const std::vector<float>& w, int64_t k, const float* x, int64_t r, double& y, double& scale,
               bool quantized_x = false) {
  std::vector<float> xq;
  if (quantized_x) {
    xq = activations_as_quantized(x, k);
    x = xq.data();
  }
  y = 0;
  scale = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double p = static_cast<double>(w[static_cast<size_t>(r * k + i)]) * x[i];
    y += p;
    scale += std::fabs(p);
  }
}

std::string label(const MatvecKernels& ks, DType t, int64_t n, int64_t k, int64_t m) {
  return std::string(ks.isa) + " " + std::string(dtype_name(t)) + " [" + std::to_string(n) + "x" + std::to_string(k) +
         "] m=" + std::to_string(m);
}

// Runs one kernel set on rows [r0, r1) of an [n, k] matrix for m activation rows and checks every output: against
// the scalar kernels, against the double reference, and that rows outside the range are left alone.
// Shapes whose rows are not whole blocks of t (the K-quants' 256 values) are skipped.
// An interleaved t rounds n up to whole groups (the row range stays as given).
void check_kernels(const MatvecKernels& ks, DType t, int64_t n, int64_t k, int64_t m, int64_t r0, int64_t r1,
                   uint32_t seed) {
  if (k % block_elems(t) != 0) return;
  n = rows_for(t, n);
  const Weights w = make_weights(t, n, k, seed);
  const std::vector<float> x = randn(m * k, seed + 1);
  const float sentinel = -12345.f;
  const int64_t ldy = n + 3;
  std::vector<float> y(static_cast<size_t>(m * ldy), sentinel), ys(y.size(), sentinel);
  if (m == 1) {
    ks.for_dtype(t)(w.stored.data(), k, x.data(), y.data(), r0, r1);
  } else {
    ks.rows_for_dtype(t)(w.stored.data(), k, x.data(), m, y.data(), ldy, r0, r1);
  }
  const MatvecFn scalar = scalar_matvec_kernels().for_dtype(t);
  for (int64_t i = 0; i < m; ++i) scalar(w.stored.data(), k, x.data() + i * k, ys.data() + i * ldy, r0, r1);

  const std::string what = label(ks, t, n, k, m);
  double worst_ref = 0, worst_scalar = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = y[static_cast<size_t>(i * ldy + r)];
      if (r < r0 || r >= r1) {
        BOOST_REQUIRE_MESSAGE(got == sentinel,
                              what << ": row " << r << " outside [" << r0 << ", " << r1 << ") was written");
        continue;
      }
      double ref, scale;
      reference(w.dequantized, k, x.data() + i * k, r, ref, scale, is_quantized(t));
      scale = std::max(scale, 1e-30);
      worst_ref = std::max(worst_ref, std::fabs(got - ref) / scale);
      worst_scalar = std::max(worst_scalar, std::fabs(got - ys[static_cast<size_t>(i * ldy + r)]) / scale);
    }
  BOOST_TEST(worst_ref < kTolerance, what << ": error vs double reference " << worst_ref);
  BOOST_TEST(worst_scalar < kTolerance, what << ": error vs scalar kernels " << worst_scalar);
}

// y = x · wᵀ one dot product at a time: the strided path of cpu_gemm run through a function of the test's own.
void reference_sgemm(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(x[i * k + j]) * w[r * k + j];
      y[i * ldy + r] = static_cast<float>(acc);
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(lists_the_instruction_sets_of_this_cpu) {
  const auto sets = available_matvec_kernels();
  BOOST_REQUIRE(!sets.empty());
  BOOST_TEST(std::string(sets.front()->isa) == "scalar");
  std::string names;
  for (const MatvecKernels* s : sets) names += std::string(" ") + s->isa;
  BOOST_TEST_MESSAGE("kernel sets on this CPU:" << names << "; chosen: " << best_matvec_kernels().isa);
  BOOST_TEST(std::string(pick_matvec_kernels("scalar").isa) == "scalar");
  BOOST_TEST(std::string(pick_matvec_kernels(nullptr).isa) == sets.back()->isa);
  BOOST_TEST(std::string(pick_matvec_kernels("avx512amx").isa) == sets.back()->isa);
  const std::string vnni = pick_matvec_kernels("avx512vnni").isa;
  BOOST_TEST((vnni == "avx512vnni" || vnni == "avx512" || vnni == "avx2" || vnni == "scalar"));
  const std::string capped = pick_matvec_kernels("avx2").isa;
  BOOST_TEST((capped == "avx2" || capped == "scalar"));
  const std::string wide = pick_matvec_kernels("avx512").isa;
  BOOST_TEST((wide == "avx512" || wide == "avx2" || wide == "scalar"));
}

BOOST_AUTO_TEST_CASE(every_dtype_and_isa_matches_scalar_and_double_reference) {
  uint32_t seed = 1;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : matvec_types()) {
      // Odd row counts (leftovers after the multi-row passes), K = 32 (one chunk), K a multiple of 32 but not 64,
      // and a model-sized K.
      check_kernels(*ks, t, 37, 32, 1, 0, 37, seed++);
      check_kernels(*ks, t, 37, 96, 1, 0, 37, seed++);
      check_kernels(*ks, t, 13, 160, 1, 0, 13, seed++);
      check_kernels(*ks, t, 9, 2080, 1, 0, 9, seed++);
      // K-quants: one super-block, three, and a model-sized K.
      check_kernels(*ks, t, 37, 256, 1, 0, 37, seed++);
      check_kernels(*ks, t, 13, 768, 1, 2, 13, seed++);
      check_kernels(*ks, t, 9, 2304, 1, 0, 9, seed++);
      // Row ranges that start and end inside the matrix, as a thread's share does.
      check_kernels(*ks, t, 37, 224, 1, 5, 30, seed++);
      check_kernels(*ks, t, 37, 224, 1, 17, 18, seed++);
      check_kernels(*ks, t, 37, 224, 1, 36, 37, seed++);
    }
}

// What quantizing the activations costs: against the exact product with f32 x, the error of every kernel set
// stays within what rounding each x to its chunk's grid allows, sum_i |w_i| d_i / 2 (plus f32 rounding). Ties are
// rounded to even, so an x exactly between two levels must land on the even one (checked with x built that way).
BOOST_AUTO_TEST_CASE(quantized_activations_cost_at_most_half_a_level_per_value) {
  uint32_t seed = 400;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : matvec_types()) {
      if (!is_quantized(t)) continue;
      const int64_t n = rows_for(t, 19), k = 512;
      const Weights w = make_weights(t, n, k, seed++);
      std::vector<float> x = randn(k, seed++);
      // Chunk 1: max 127, so d = 1 and the levels are the integers; 2.5 and -3.5 are ties.
      for (int64_t i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.f;
      x[32] = 127.f;
      x[33] = 2.5f;
      x[34] = -3.5f;
      const std::vector<float> xq = activations_as_quantized(x.data(), k);
      BOOST_REQUIRE(xq[33] == 2.f && xq[34] == -4.f);
      std::vector<float> y(static_cast<size_t>(n));
      ks->for_dtype(t)(w.stored.data(), k, x.data(), y.data(), 0, n);
      double worst = 0;
      for (int64_t r = 0; r < n; ++r) {
        double exact, scale, bound = 0;
        reference(w.dequantized, k, x.data(), r, exact, scale);
        for (int64_t c = 0; c < k; c += 32) {
          float amax = 0;
          for (int64_t i = c; i < c + 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
          for (int64_t i = c; i < c + 32; ++i)
            bound += std::fabs(w.dequantized[static_cast<size_t>(r * k + i)]) * amax / 127.0 / 2;
        }
        const double err = std::fabs(y[static_cast<size_t>(r)] - exact);
        BOOST_TEST(err <= bound + kTolerance * scale, ks->isa << " " << dtype_name(t) << " row " << r);
        worst = std::max(worst, err / scale);
      }
      BOOST_TEST_MESSAGE(ks->isa << " " << dtype_name(t) << ": worst error vs f32 activations " << worst
                                 << " of sum |w x|");
    }
}

// A row's product does not depend on the rows it shares a pass with: the integer kernels give each row of x the same
// arithmetic whatever m is, bit for bit, in every kernel set (so a session's decode step gives the same result alone
// or batched), and through cpu_matvec_rows, whose threads split the rows.
BOOST_AUTO_TEST_CASE(quantized_rows_do_not_depend_on_their_batch) {
  uint32_t seed = 450;
  ThreadPool pool(2);
  for (DType t : matvec_types()) {
    if (!is_quantized(t)) continue;
    const int64_t n = rows_for(t, 70), k = 512, m = 37;
    const Weights w = make_weights(t, n, k, seed++);
    const std::vector<float> x = randn(m * k, seed++);
    std::vector<float> batched(static_cast<size_t>(m * n)), alone(static_cast<size_t>(n));
    for (const MatvecKernels* ks : available_matvec_kernels()) {
      ks->rows_for_dtype(t)(w.stored.data(), k, x.data(), m, batched.data(), n, 0, n);
      for (int64_t i = 0; i < m; ++i) {
        ks->for_dtype(t)(w.stored.data(), k, x.data() + i * k, alone.data(), 0, n);
        BOOST_TEST(std::equal(alone.begin(), alone.end(), batched.begin() + i * n),
                   ks->isa << " " << dtype_name(t) << " row " << i);
      }
    }
    cpu_matvec_rows(pool, x.data(), m, k, w.stored, batched.data());
    for (int64_t i = 0; i < m; ++i) {
      cpu_matvec_rows(pool, x.data() + i * k, 1, k, w.stored, alone.data());
      BOOST_TEST(std::equal(alone.begin(), alone.end(), batched.begin() + i * n), dtype_name(t) << " row " << i);
    }
  }
}

// bf16 weights on AMX tiles (matvec_amx.cpp, from prepared_min_rows rows of x) give each row of x the same
// arithmetic whatever the batch, bit for bit, including rows of a last, partial group of 16 weight rows and a last,
// partial chunk of k; and through cpu_matvec_rows, whose threads split the rows and prepare x in groups of 16.
BOOST_AUTO_TEST_CASE(amx_bf16_rows_do_not_depend_on_their_batch) {
  const auto sets = available_matvec_kernels();
  if (std::string(sets.back()->isa) != "avx512amx") {
    BOOST_TEST_MESSAGE("no AMX on this CPU: skipped");
    return;
  }
  const MatvecKernels& amx = *sets.back();
  const int64_t least = amx.by_dtype[static_cast<size_t>(DType::bf16)].prepared_min_rows;
  BOOST_REQUIRE(least > 1);
  uint32_t seed = 470;
  ThreadPool pool(2);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{150, 2080}, {70, 45}, {64, 4096}}) {
    const int64_t m = 37;
    const Weights w = make_weights(DType::bf16, n, k, seed++);
    const std::vector<float> x = randn(m * k, seed++);
    std::vector<float> batched(static_cast<size_t>(m * n)), few(static_cast<size_t>(least * n));
    amx.rows_for_dtype(DType::bf16)(w.stored.data(), k, x.data(), m, batched.data(), n, 0, n);
    // Every window of `least` rows of x, as its own batch.
    for (int64_t i = 0; i + least <= m; i += least / 2) {
      amx.rows_for_dtype(DType::bf16)(w.stored.data(), k, x.data() + i * k, least, few.data(), n, 0, n);
      BOOST_TEST(std::equal(few.begin(), few.end(), batched.begin() + i * n), "n=" << n << " k=" << k << " from " << i);
    }
    std::vector<float> pooled(batched.size());
    cpu_matvec_rows(pool, x.data(), m, k, w.stored, pooled.data());
    BOOST_TEST(pooled == batched, "cpu_matvec_rows n=" << n << " k=" << k);
  }
}

BOOST_AUTO_TEST_CASE(plain_dtypes_accept_any_k) {
  uint32_t seed = 100;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (int64_t k : {1, 7, 31, 33, 45, 100, 1000}) check_kernels(*ks, t, 11, k, 1, 2, 11, seed++);
}

BOOST_AUTO_TEST_CASE(several_activation_rows_share_one_pass) {
  uint32_t seed = 200;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : matvec_types())
      for (int64_t m = 2; m <= kMatvecMaxRows + 3; ++m) {
        check_kernels(*ks, t, 23, 96, m, 0, 23, seed++);
        check_kernels(*ks, t, 37, 160, m, 3, 34, seed++);
        check_kernels(*ks, t, 37, 512, m, 3, 34, seed++);
      }
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : {DType::f32, DType::bf16}) check_kernels(*ks, t, 10, 77, 3, 1, 9, seed++);
  // More rows of x than one pass takes, over weights large enough to be split into several L2 tiles.
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : matvec_types()) {
      check_kernels(*ks, t, 150, 2048 + 32, 9, 5, 149, seed++);
      check_kernels(*ks, t, 150, 2048 + 256, 9, 5, 149, seed++);
    }
}

BOOST_AUTO_TEST_CASE(dequantization_matches_to_f32_exactly) {
  uint32_t seed = 250;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : kWeightTypes)
      for (int64_t n : {32, 64, 96, 256, 4096, 4096 + 32 * 7, 4096 + 256 * 3}) {
        if (n % block_elems(t) != 0) continue;
        const Weights w = make_weights(t, 1, n, seed++);
        std::vector<float> got(static_cast<size_t>(n) + 1, -7.f);
        ks->dequant_for_dtype(t)(w.stored.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i)
          BOOST_REQUIRE_MESSAGE(got[static_cast<size_t>(i)] == w.dequantized[static_cast<size_t>(i)],
                                ks->isa << " " << dtype_name(t) << " n=" << n << " at " << i);
        BOOST_TEST(got[static_cast<size_t>(n)] == -7.f);  // nothing written past n
      }
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (int64_t n : {1, 31, 45}) {
        const Weights w = make_weights(t, 1, n, seed++);
        std::vector<float> got(static_cast<size_t>(n));
        ks->dequant_for_dtype(t)(w.stored.data(), got.data(), n);
        BOOST_TEST(got == w.dequantized, ks->isa << " " << dtype_name(t) << " n=" << n);
      }
}

BOOST_AUTO_TEST_CASE(packing_transposes_into_padded_panels) {
  uint32_t seed = 280;
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType t : kWeightTypes)
      for (int64_t rows : {1, 15, 16, 17, 64, 70, 128})
        for (int64_t k : {32, 45, 160, 256, 2048 + 32, 2048 + 256}) {
          if (k % block_elems(t) != 0) continue;
          const Weights w = make_weights(t, rows, k, seed++);
          const int64_t depth = panel_depth(k), size = packed_floats(k, rows);
          std::vector<float> got(static_cast<size_t>(size) + 1, -7.f);
          ks->pack_for_dtype(t)(w.stored.data(), k, rows, got.data());
          bool same = true;
          for (int64_t p = 0; p < size; ++p) {
            const int64_t panel = p / (depth * kPanelRows), kk = p / kPanelRows % depth;
            const int64_t r = panel * kPanelRows + p % kPanelRows;
            const float want = r < rows && kk < k ? w.dequantized[static_cast<size_t>(r * k + kk)] : 0.f;
            if (got[static_cast<size_t>(p)] != want) same = false;
          }
          BOOST_TEST(same, ks->isa << " " << dtype_name(t) << " rows=" << rows << " k=" << k);
          BOOST_TEST(got[static_cast<size_t>(size)] == -7.f);  // nothing written past the panels
        }
}

namespace {
// `matvec_path`: y came from the matrix-vector kernels, which round x to 8 bits for quantized weights (the GEMM
// path keeps it f32).
double matmul_error(const Weights& w, int64_t n, int64_t k, int64_t m, const std::vector<float>& x,
                    const std::vector<float>& y, bool matvec_path) {
  const bool quantized_x = matvec_path && is_quantized(w.stored.dtype());
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      double ref, scale;
      reference(w.dequantized, k, x.data() + i * k, r, ref, scale, quantized_x);
      worst = std::max(worst, std::fabs(y[static_cast<size_t>(i * n + r)] - ref) / std::max(scale, 1e-30));
    }
  return worst;
}
}  // namespace

BOOST_AUTO_TEST_CASE(cpu_matmul_matches_naive_reference) {
  ThreadPool pool(2);
  uint32_t seed = 300;
  // n = 300 rows split over 2 threads; the GEMM path packs weights in tiles of 128 rows. Every m goes through
  // cpu_matmul (which picks a path), the matrix-vector path and the GEMM path with each library.
  // n = 70, k = 45: a short last panel and a tail of k (plain dtypes only; quantized rows are whole blocks, of
  // 256 values for the K-quants: k = 512).
  for (auto [rows, k] : {std::pair<int64_t, int64_t>{300, 160}, {70, 45}, {300, 512}}) {
    for (DType t : matvec_types()) {
      if (k % block_elems(t) != 0) continue;
      const int64_t n = rows_for(t, rows);
      const Weights w = make_weights(t, n, k, seed++);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 9, 17, 33, 37, 64, 65}) {
        const std::vector<float> x = randn(m * k, seed++);
        std::vector<float> y(static_cast<size_t>(m * n), -1.f);
        cpu_matmul(pool, x.data(), m, k, w.stored, y.data());
        BOOST_TEST(matmul_error(w, n, k, m, x, y, m <= matvec_max_rows(t)) < kTolerance,
                   "cpu_matmul " << dtype_name(t) << " m=" << m);
        std::fill(y.begin(), y.end(), -1.f);
        cpu_matvec_rows(pool, x.data(), m, k, w.stored, y.data());
        BOOST_TEST(matmul_error(w, n, k, m, x, y, true) < kTolerance,
                   "cpu_matvec_rows " << dtype_name(t) << " m=" << m);
        for (const Sgemm strided : {Sgemm{nullptr}, Sgemm{reference_sgemm}}) {
          std::fill(y.begin(), y.end(), -1.f);
          cpu_gemm(pool, x.data(), m, k, w.stored, y.data(), strided);
          BOOST_TEST(matmul_error(w, n, k, m, x, y, false) < kTolerance,
                     "cpu_gemm (" << (strided ? "tiles through a given sgemm" : "oneDNN") << ") " << dtype_name(t)
                                  << " m=" << m);
        }
      }
    }
  }
}

// The interleaved layout keeps every block: each row comes back byte for byte, as f32 by rows and through
// Tensor::cast; matrices that are not whole groups are refused; the CPU backend's placement interleaves q4_0 and
// q8_0 for a kernel set that reads them faster, and only then.
BOOST_AUTO_TEST_CASE(interleaved_rows_keep_every_block) {
  uint32_t seed = 500;
  for (DType t : kInterleavedTypes) {
    const DType plain = plain_form(t);
    BOOST_TEST((interleaved_form(plain) == std::optional<DType>(t)));
    BOOST_TEST(storage_bytes(t, 512) == storage_bytes(plain, 512));
    for (auto [n, k] : {std::pair<int64_t, int64_t>{16, 256}, {48, 768}, {32, 2048 + 256}}) {
      const Weights w = make_weights(t, n, k, seed++);
      const Weights again = make_weights(plain, n, k, seed - 1);  // the same draw, plain
      const int64_t row_bytes = storage_bytes(plain, k);
      std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
      for (int64_t r = 0; r < n; ++r) {
        deinterleave_blocks(t, w.stored.data(), k, r, 0, k / block_elems(t), row.data());
        BOOST_REQUIRE_MESSAGE(std::memcmp(row.data(), static_cast<const char*>(again.stored.data()) + r * row_bytes,
                                          static_cast<size_t>(row_bytes)) == 0,
                              dtype_name(t) << " [" << n << "x" << k << "] row " << r);
        std::vector<float> cols(static_cast<size_t>(k));
        const int64_t c0 = k > 256 ? 256 : 0, c1 = c0 + 256;
        interleaved_row_to_f32(t, w.stored.data(), k, r, c0, c1, cols.data());
        for (int64_t c = c0; c < c1; ++c)
          BOOST_REQUIRE(cols[static_cast<size_t>(c - c0)] == w.dequantized[static_cast<size_t>(r * k + c)]);
      }
      const Tensor f = w.stored.to_f32();
      BOOST_TEST(std::equal(w.dequantized.begin(), w.dequantized.end(), f.data_as<const float>()));
      std::vector<uint8_t> plain_rows(static_cast<size_t>(n * row_bytes));
      deinterleave_rows(t, w.stored.data(), plain_rows.data(), n, k);
      BOOST_TEST(std::memcmp(plain_rows.data(), again.stored.data(), plain_rows.size()) == 0);
    }
    std::vector<uint8_t> buf(static_cast<size_t>(storage_bytes(plain, 24 * 256)));
    BOOST_CHECK_THROW(interleave_rows(plain, buf.data(), buf.data(), 24, 256), std::invalid_argument);
    std::vector<float> out(256);
    BOOST_CHECK_THROW(to_f32(t, buf.data(), out.data(), 256), std::invalid_argument);
  }
  for (const MatvecKernels* ks : available_matvec_kernels())
    for (DType plain : {DType::q4_0, DType::q8_0, DType::q4_1, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K,
                        DType::q6_K, DType::q5_0, DType::iq4_nl})
      for (int64_t n : {32, 40}) {
        const Weights w = make_weights(plain, n, 256, seed++);
        const Tensor placed = placed_for_kernels(w.stored, *ks);
        const bool interleaves = ks->reads_interleaved(plain) && n % kInterleavedRows == 0;
        BOOST_TEST((placed.dtype() == (interleaves ? *interleaved_form(plain) : plain)),
                   ks->isa << " " << dtype_name(plain) << " n=" << n);
        const Tensor f = placed.to_f32();
        BOOST_TEST(std::equal(w.dequantized.begin(), w.dequantized.end(), f.data_as<const float>()));
      }
}

// Every level at its extreme meets every activation at ±127: the SIMD sets add products in int16 where that cannot
// overflow (AVX2's vpmaddubsw sums), which only such weights would show. Blocks are filled byte by byte (scales 1,
// every level and sub-block scale at its maximum; q8_0 at -128 and -127) and compared with the scalar set's integers.
BOOST_AUTO_TEST_CASE(extreme_levels_do_not_overflow_integer_sums) {
  const int64_t n = 32, k = 512;
  for (DType t : kInterleavedTypes) {
    const DType plain = plain_form(t);
    const int64_t bb = block_bytes(plain), blocks = n * k / block_elems(plain);
    std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb), 0xff);
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = bytes.data() + b * bb;
      auto one = [&](int at) { blk[at] = 0x00, blk[at + 1] = 0x3c; };  // f16 1.0
      switch (plain) {
        case DType::q8_0:
          one(0);
          std::fill(blk + 2, blk + bb, static_cast<uint8_t>(b % 2 ? 0x80 : 0x81));
          break;
        case DType::q4_0:
        case DType::iq4_nl: one(0); break;
        case DType::q4_1: one(0), one(2); break;
        case DType::q4_K:
        case DType::q5_K: one(0), one(2); break;
        case DType::q6_K: one(208); break;
        case DType::q2_K: one(80), one(82); break;
        case DType::q3_K: one(108); break;
        default: BOOST_FAIL("no extreme blocks for " << dtype_name(plain));
      }
    }
    Tensor w = Tensor::empty(t, {n, k});
    interleave_rows(plain, bytes.data(), w.data(), n, k);
    for (float sign : {1.f, -1.f}) {
      const std::vector<float> x(static_cast<size_t>(k), sign);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      scalar_matvec_kernels().for_dtype(t)(w.data(), k, x.data(), want.data(), 0, n);
      for (const MatvecKernels* ks : available_matvec_kernels()) {
        ks->for_dtype(t)(w.data(), k, x.data(), got.data(), 0, n);
        for (int64_t r = 0; r < n; ++r)
          BOOST_TEST(
              std::fabs(got[static_cast<size_t>(r)] - want[static_cast<size_t>(r)]) <=
                  kTolerance * std::fabs(want[static_cast<size_t>(r)]),
              ks->isa << " " << dtype_name(t) << " x=" << sign << " row " << r << ": " << got[r] << " vs " << want[r]);
      }
    }
  }
}
