// The decode-attention products of every instruction set this CPU runs (kernels/cpu/decode_attention.hpp) against
// double precision, over strided keys and values, rows and key counts that are not multiples of a vector; and
// what keeps a session's tokens independent of its batch: a row's results are the same bits whichever rows share
// its call and however its keys are split into runs.
#define BOOST_TEST_MODULE decode_attention
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/decode_attention.hpp"
#include "kernels/dtype.hpp"

using namespace corolla;

namespace {

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Shape {
  int64_t rows, keys, head_dim, stride;  // stride: floats between consecutive keys' (values') rows
};

// Random queries q [rows, head_dim], keys and values k, v [keys, stride] and weights p [rows, keys].
struct Inputs {
  std::vector<float> q, k, v, p;
  Inputs(const Shape& s, uint32_t seed)
      : q(uniform(static_cast<size_t>(s.rows * s.head_dim), seed)),
        k(uniform(static_cast<size_t>(s.keys * s.stride), seed + 1)),
        v(uniform(static_cast<size_t>(s.keys * s.stride), seed + 2)),
        p(uniform(static_cast<size_t>(s.rows * s.keys), seed + 3)) {}
};

std::vector<Shape> shapes(int64_t lanes) {
  std::vector<Shape> out;
  for (int64_t head_dim : {lanes, int64_t{64}, int64_t{80}, int64_t{128}, int64_t{256}})
    if (head_dim % lanes == 0)
      for (int64_t rows : {1, 3, 5, 8})
        for (int64_t keys : {1, 7, 16, 17, 64, 130, 300}) out.push_back({rows, keys, head_dim, 3 * head_dim});
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_set_this_cpu_runs_is_listed) {
  for (const DecodeAttentionKernels* k : available_decode_attention_kernels())
    BOOST_TEST_MESSAGE("decode attention set " << k->isa << ", " << k->lanes << " lanes");
  const DecodeAttentionKernels* best = best_decode_attention_kernels();
  BOOST_TEST_MESSAGE("chosen: " << (best ? best->isa : "none (oneDNN's sgemm)"));
  const auto sets = available_decode_attention_kernels();
  BOOST_TEST((best == nullptr || std::find(sets.begin(), sets.end(), best) != sets.end()));
}

BOOST_AUTO_TEST_CASE(scores_and_values_match_double_precision) {
  for (const DecodeAttentionKernels* ks : available_decode_attention_kernels())
    for (const Shape& s : shapes(ks->lanes)) {
      const Inputs in(s, 1);
      const auto &q = in.q, &k = in.k, &v = in.v, &p = in.p;
      const float scale = 0.125f;
      std::vector<float> scores(static_cast<size_t>(s.rows * s.keys));
      ks->scores(q.data(), s.head_dim, s.rows, k.data(), s.stride, s.keys, s.head_dim, scale, scores.data(), s.keys);
      const auto before = uniform(static_cast<size_t>(s.rows * s.head_dim), 5);
      for (const bool accumulate : {false, true}) {
        std::vector<float> out = before;
        ks->values(p.data(), s.keys, s.rows, v.data(), s.stride, s.keys, s.head_dim, out.data(), s.head_dim,
                   accumulate);
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t d = 0; d < s.head_dim; ++d) {
            double want = accumulate ? before[static_cast<size_t>(r * s.head_dim + d)] : 0.0, size = std::fabs(want);
            for (int64_t j = 0; j < s.keys; ++j) {
              const double term =
                  double(p[static_cast<size_t>(r * s.keys + j)]) * v[static_cast<size_t>(j * s.stride + d)];
              want += term;
              size += std::fabs(term);
            }
            const double got = out[static_cast<size_t>(r * s.head_dim + d)];
            BOOST_REQUIRE_MESSAGE(std::fabs(got - want) <= 1e-6 * size + 1e-7,
                                  ks->isa << " values rows " << s.rows << " keys " << s.keys << " dim " << s.head_dim
                                          << " at " << r << "," << d << ": " << got << " against " << want);
          }
      }
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t j = 0; j < s.keys; ++j) {
          double want = 0, size = 0;
          for (int64_t d = 0; d < s.head_dim; ++d) {
            const double term =
                double(q[static_cast<size_t>(r * s.head_dim + d)]) * k[static_cast<size_t>(j * s.stride + d)];
            want += term;
            size += std::fabs(term);
          }
          const double got = scores[static_cast<size_t>(r * s.keys + j)];
          BOOST_REQUIRE_MESSAGE(std::fabs(got - scale * want) <= 1e-6 * scale * size + 1e-7,
                                ks->isa << " scores rows " << s.rows << " keys " << s.keys << " dim " << s.head_dim
                                        << " at " << r << "," << j << ": " << got << " against " << scale * want);
        }
    }
}

// Row r computed alone, and keys split into two runs (the second continuing the first's sums), give the bits of
// one call over every row and key.
BOOST_AUTO_TEST_CASE(a_rows_results_do_not_depend_on_the_rows_or_runs_that_share_its_call) {
  for (const DecodeAttentionKernels* ks : available_decode_attention_kernels())
    for (const Shape& s : shapes(ks->lanes)) {
      const Inputs in(s, 11);
      const auto &q = in.q, &k = in.k, &v = in.v, &p = in.p;
      std::vector<float> scores(static_cast<size_t>(s.rows * s.keys)), out(static_cast<size_t>(s.rows * s.head_dim));
      ks->scores(q.data(), s.head_dim, s.rows, k.data(), s.stride, s.keys, s.head_dim, 0.5f, scores.data(), s.keys);
      ks->values(p.data(), s.keys, s.rows, v.data(), s.stride, s.keys, s.head_dim, out.data(), s.head_dim, false);
      const int64_t split = s.keys / 3;  // 0 for one key: the first run is empty, the second has it all
      for (int64_t r = 0; r < s.rows; ++r) {
        std::vector<float> alone_scores(static_cast<size_t>(s.keys)), alone_out(static_cast<size_t>(s.head_dim));
        const float* qr = q.data() + r * s.head_dim;
        if (split > 0)
          ks->scores(qr, s.head_dim, 1, k.data(), s.stride, split, s.head_dim, 0.5f, alone_scores.data(), s.keys);
        ks->scores(qr, s.head_dim, 1, k.data() + split * s.stride, s.stride, s.keys - split, s.head_dim, 0.5f,
                   alone_scores.data() + split, s.keys);
        const float* pr = p.data() + r * s.keys;
        if (split > 0)
          ks->values(pr, s.keys, 1, v.data(), s.stride, split, s.head_dim, alone_out.data(), s.head_dim, false);
        ks->values(pr + split, s.keys, 1, v.data() + split * s.stride, s.stride, s.keys - split, s.head_dim,
                   alone_out.data(), s.head_dim, split > 0);
        for (int64_t j = 0; j < s.keys; ++j)
          BOOST_REQUIRE_MESSAGE(
              alone_scores[static_cast<size_t>(j)] == scores[static_cast<size_t>(r * s.keys + j)],
              ks->isa << " score of row " << r << " of " << s.rows << ", key " << j << " of " << s.keys);
        for (int64_t d = 0; d < s.head_dim; ++d)
          BOOST_REQUIRE_MESSAGE(alone_out[static_cast<size_t>(d)] == out[static_cast<size_t>(r * s.head_dim + d)],
                                ks->isa << " value of row " << r << " of " << s.rows << ", lane " << d);
      }
    }
}

// Over an f16 cache the products are the bits of those over an f32 cache holding the same values, narrow_f16 rounds
// as f32_to_f16 does, and widen_f16 widens a strided run exactly.
BOOST_AUTO_TEST_CASE(f16_caches_give_the_bits_of_f32_caches_holding_the_same_values) {
  for (const DecodeAttentionKernels* ks : available_decode_attention_kernels())
    for (const Shape& s : shapes(ks->lanes)) {
      const Inputs in(s, 21);
      std::vector<uint16_t> k16(in.k.size()), v16(in.v.size());
      std::vector<float> k(in.k.size()), v(in.v.size());
      for (size_t i = 0; i < k.size(); ++i) {
        k16[i] = f32_to_f16(in.k[i]);
        v16[i] = f32_to_f16(in.v[i]);
        k[i] = f16_to_f32(k16[i]);
        v[i] = f16_to_f32(v16[i]);
      }
      std::vector<float> want(static_cast<size_t>(s.rows * s.keys)), got(want.size());
      ks->scores(in.q.data(), s.head_dim, s.rows, k.data(), s.stride, s.keys, s.head_dim, 0.25f, want.data(), s.keys);
      ks->scores_f16(in.q.data(), s.head_dim, s.rows, k16.data(), s.stride, s.keys, s.head_dim, 0.25f, got.data(),
                     s.keys);
      BOOST_REQUIRE_MESSAGE(want == got, ks->isa << " scores over f16, rows " << s.rows << " keys " << s.keys);
      std::vector<float> out_want(static_cast<size_t>(s.rows * s.head_dim)), out_got(out_want.size());
      ks->values(in.p.data(), s.keys, s.rows, v.data(), s.stride, s.keys, s.head_dim, out_want.data(), s.head_dim,
                 false);
      ks->values_f16(in.p.data(), s.keys, s.rows, v16.data(), s.stride, s.keys, s.head_dim, out_got.data(), s.head_dim,
                     false);
      BOOST_REQUIRE_MESSAGE(out_want == out_got, ks->isa << " values over f16, rows " << s.rows << " keys " << s.keys);
      std::vector<uint16_t> narrowed(in.k.size() + 1, 0x7e00);  // rounded as f32_to_f16 does, nothing past n
      ks->narrow_f16(in.k.data(), narrowed.data(), static_cast<int64_t>(in.k.size()));
      BOOST_REQUIRE(std::equal(k16.begin(), k16.end(), narrowed.begin()));
      BOOST_REQUIRE(narrowed.back() == 0x7e00);
      for (const int64_t cols : {s.head_dim, s.head_dim - 3}) {  // a run's head, and a width no vector divides
        std::vector<float> widened(static_cast<size_t>(s.keys * cols), -1.f);
        ks->widen_f16(k16.data(), s.stride, s.keys, cols, widened.data());
        for (int64_t r = 0; r < s.keys; ++r)
          for (int64_t c = 0; c < cols; ++c)
            BOOST_REQUIRE(widened[static_cast<size_t>(r * cols + c)] == k[static_cast<size_t>(r * s.stride + c)]);
      }
    }
}
