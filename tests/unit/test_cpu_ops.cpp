// CPU backend operations against direct double-precision formulas.
#define BOOST_TEST_MODULE cpu_ops
#include <array>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/backend.hpp"
#include "kernels/dtype.hpp"
#include "kernels/cpu/matvec.hpp"
#include "kernels/interleaved_rows.hpp"
#include "support/quantized_activations.hpp"

using namespace corolla;

namespace {

Tensor random_tensor(Shape s, uint32_t seed) {
  Tensor t = Tensor::empty(DType::f32, s);
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

float at(const Tensor& t, int64_t i) { return t.data_as<const float>()[i]; }

float max_abs_diff_of(const Tensor& a, const Tensor& b) {
  float worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(at(a, i) - at(b, i)));
  return worst;
}

Backend& cpu() {
  static auto b = make_cpu_backend(2);
  return *b;
}

// The largest difference between out [B, T, Hq·Dh] and causal attention computed in double precision from q
// [B, T, Hq, Dh] and the caches [B, S, Hkv, Dh] at the given positions (with the spec's window and soft cap).
double worst_error_vs_naive(const Tensor& q, const Tensor& kc, const Tensor& vc, const std::vector<int32_t>& pos,
                            const AttentionSpec& spec, const Tensor& out) {
  const double scale = spec.scale;
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), hd = q.dim(3), slots = kc.dim(1), hkv = kc.dim(2);
  double worst = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv), last = pos[static_cast<size_t>(bi * t + ti)];
        const float* kv_k = kc.data_as<const float>() + bi * slots * hkv * hd;
        const float* kv_v = vc.data_as<const float>() + bi * slots * hkv * hd;
        const int64_t first = spec.first_slot(last);
        std::vector<double> s(static_cast<size_t>(last + 1), 0.0);
        double mx = -1e30, z = 0;
        for (int64_t j = first; j <= last; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += at(q, ((bi * t + ti) * hq + h) * hd + i) * kv_k[(j * hkv + g) * hd + i];
          const double x = spec.softcap > 0 ? spec.softcap * std::tanh(d * scale / spec.softcap) : d * scale;
          s[static_cast<size_t>(j)] = x;
          mx = std::max(mx, x);
        }
        for (int64_t j = first; j <= last; ++j)
          z += (s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double want = 0;
          for (int64_t j = first; j <= last; ++j) want += s[static_cast<size_t>(j)] / z * kv_v[(j * hkv + g) * hd + i];
          worst = std::max(worst, std::fabs(at(out, (bi * t + ti) * hq * hd + h * hd + i) - want));
        }
      }
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_CASE(layer_norm_matches_formula) {
  Tensor x = random_tensor({3, 40}, 1), w = random_tensor({40}, 2), b = random_tensor({40}, 3);
  Tensor y = cpu().alloc(DType::f32, {3, 40});
  cpu().layer_norm(x, w, b, 1e-5f, y);
  for (int r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 40; ++i) mean += at(x, r * 40 + i);
    mean /= 40;
    for (int i = 0; i < 40; ++i) var += std::pow(at(x, r * 40 + i) - mean, 2);
    var /= 40;
    for (int i = 0; i < 40; ++i) {
      const double want = (at(x, r * 40 + i) - mean) / std::sqrt(var + 1e-5) * at(w, i) + at(b, i);
      BOOST_TEST(std::fabs(at(y, r * 40 + i) - want) < 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(rope_rotates_halves) {
  Tensor x = random_tensor({2, 3, 8}, 4);
  Tensor orig = x.clone();
  std::vector<int32_t> pos = {5, 17};
  std::vector<float> inv = {1.0f, 0.1f, 0.01f, 0.001f};
  cpu().rope(x, pos, inv);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 4; ++i) {
        const int64_t base = (t * 3 + h) * 8;
        const double a = at(orig, base + i), b = at(orig, base + i + 4), ang = pos[t] * double(inv[i]);
        BOOST_TEST(std::fabs(at(x, base + i) - (a * std::cos(ang) - b * std::sin(ang))) < 1e-5);
        BOOST_TEST(std::fabs(at(x, base + i + 4) - (b * std::cos(ang) + a * std::sin(ang))) < 1e-5);
      }
}

// Partial rotary (Phi-4-mini): 3 frequencies for heads of 8 turn pairs (i, i + 3) of the first 6 values; the last
// two pass unchanged. More frequencies than head_dim / 2, or none, are refused.
BOOST_AUTO_TEST_CASE(rope_over_part_of_each_head_leaves_the_rest) {
  Tensor x = random_tensor({2, 3, 8}, 4);
  Tensor orig = x.clone();
  std::vector<int32_t> pos = {5, 17};
  std::vector<float> inv = {1.0f, 0.1f, 0.01f};
  cpu().rope(x, pos, inv);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h) {
      const int64_t base = (t * 3 + h) * 8;
      for (int i = 0; i < 3; ++i) {
        const double a = at(orig, base + i), b = at(orig, base + i + 3), ang = pos[t] * double(inv[i]);
        BOOST_TEST(std::fabs(at(x, base + i) - (a * std::cos(ang) - b * std::sin(ang))) < 1e-5);
        BOOST_TEST(std::fabs(at(x, base + i + 3) - (b * std::cos(ang) + a * std::sin(ang))) < 1e-5);
      }
      BOOST_TEST(at(x, base + 6) == at(orig, base + 6));
      BOOST_TEST(at(x, base + 7) == at(orig, base + 7));
    }
  std::vector<float> too_many(5, 1.0f), none;
  BOOST_CHECK_THROW(cpu().rope(x, pos, too_many), std::invalid_argument);
  BOOST_CHECK_THROW(cpu().rope(x, pos, none), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(grouped_query_attention_matches_naive) {
  const int64_t b = 2, t = 3, hq = 4, hkv = 2, hd = 8, slots = 10;
  Tensor q = random_tensor({b, t, hq, hd}, 5);
  Tensor k = random_tensor({b, t, hkv, hd}, 6), v = random_tensor({b, t, hkv, hd}, 7);
  Tensor kc = cpu().alloc(DType::f32, {b, slots, hkv, hd}), vc = cpu().alloc(DType::f32, {b, slots, hkv, hd});
  std::vector<int32_t> pos = {0, 1, 2, 0, 1, 2};
  ContiguousKv cache(kc, vc);
  cpu().kv_write(k, v, pos, cache.pages());
  Tensor out = cpu().alloc(DType::f32, {b, t, hq * hd});
  const float scale = 0.35f;
  cpu().attention(q, cache.pages(), pos, {.scale = scale}, out);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        std::vector<double> s(static_cast<size_t>(ti + 1));
        double mx = -1e30, z = 0;
        for (int64_t j = 0; j <= ti; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += at(q, ((bi * t + ti) * hq + h) * hd + i) * at(k, ((bi * t + j) * hkv + g) * hd + i);
          s[static_cast<size_t>(j)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double want = 0;
          for (int64_t j = 0; j <= ti; ++j)
            want += s[static_cast<size_t>(j)] / z * at(v, ((bi * t + j) * hkv + g) * hd + i);
          BOOST_TEST(std::fabs(at(out, (bi * t + ti) * hq * hd + h * hd + i) - want) < 1e-5);
        }
      }
}

// Many queries take the GEMM path, in blocks of kAttentionQueryBlock queries: 150 queries make two whole blocks
// and a short one; the second sequence continues after 30 cached tokens.
BOOST_AUTO_TEST_CASE(prefill_attention_in_query_blocks_matches_naive) {
  const int64_t b = 2, t = 150, hq = 4, hkv = 2, hd = 16, slots = 200, past = 30;
  Tensor kc = cpu().alloc(DType::f32, {b, slots, hkv, hd}), vc = cpu().alloc(DType::f32, {b, slots, hkv, hd});
  Tensor k_past = random_tensor({1, past, hkv, hd}, 20), v_past = random_tensor({1, past, hkv, hd}, 21);
  std::vector<int32_t> past_pos(static_cast<size_t>(past));
  for (int64_t i = 0; i < past; ++i) past_pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ContiguousKv second(kc.slice_rows(1, 2), vc.slice_rows(1, 2));  // the second sequence's cache
  cpu().kv_write(k_past, v_past, past_pos, second.pages());
  Tensor q = random_tensor({b, t, hq, hd}, 22);
  Tensor k = random_tensor({b, t, hkv, hd}, 23), v = random_tensor({b, t, hkv, hd}, 24);
  std::vector<int32_t> pos(static_cast<size_t>(b * t));
  for (int64_t i = 0; i < t; ++i) {
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    pos[static_cast<size_t>(t + i)] = static_cast<int32_t>(past + i);
  }
  ContiguousKv cache(kc, vc);
  cpu().kv_write(k, v, pos, cache.pages());
  Tensor out = cpu().alloc(DType::f32, {b, t, hq * hd});
  // Whole history, then sliding windows: one shorter than a query block (a block spans several windows), one
  // longer than some histories.
  // Gemma 2's soft cap (small, so that it changes the scores) with and without a window.
  for (const int64_t window : {0, 20, 100})
    for (const float softcap : {0.f, 0.5f}) {
      const AttentionSpec spec{.scale = 0.25f, .window = window, .softcap = softcap};
      cpu().attention(q, cache.pages(), pos, spec, out);
      BOOST_TEST(worst_error_vs_naive(q, kc, vc, pos, spec, out) < 1e-5, "window " << window << ", cap " << softcap);
    }
}

BOOST_AUTO_TEST_CASE(kv_write_beyond_the_cache_is_an_error) {
  Tensor k = random_tensor({1, 1, 2, 8}, 8);
  Tensor kc = cpu().alloc(DType::f32, {1, 4, 2, 8}), vc = cpu().alloc(DType::f32, {1, 4, 2, 8});
  std::vector<int32_t> pos = {4};
  ContiguousKv cache(kc, vc);
  BOOST_CHECK_THROW(cpu().kv_write(k, k, pos, cache.pages()), std::invalid_argument);
}

// A cache in pages scattered over a pool (in no order, some consecutive, some not) computes what the same
// history in one contiguous cache computes: decode (the head-group path) and prefill (the GEMM path), with
// windows that start inside a page; the keys land in the pool rows the table names.
BOOST_AUTO_TEST_CASE(attention_over_scattered_pages_equals_a_contiguous_cache) {
  const int64_t b = 2, hq = 8, hkv = 2, hd = 16, page = 16, per_sequence = 5, slots = page * per_sequence;
  const std::vector<int32_t> table = {7, 8, 2, 9, 0, 3, 4, 5, 1, 10};  // [b, per_sequence] of a pool of 12 pages
  Tensor k_pool = cpu().alloc(DType::f32, {12, page, hkv, hd}), v_pool = cpu().alloc(DType::f32, {12, page, hkv, hd});
  const KvPages paged{k_pool, v_pool, table, b};
  Tensor kc = cpu().alloc(DType::f32, {b, slots, hkv, hd}), vc = cpu().alloc(DType::f32, {b, slots, hkv, hd});
  ContiguousKv contiguous(kc, vc);
  // Histories of 75 and 40 tokens written into both.
  Tensor k = random_tensor({b, 75, hkv, hd}, 50), v = random_tensor({b, 75, hkv, hd}, 51);
  std::vector<int32_t> pos(2 * 75);
  for (int64_t i = 0; i < 75; ++i)
    pos[static_cast<size_t>(i)] = pos[static_cast<size_t>(75 + i)] = static_cast<int32_t>(i);
  cpu().kv_write(k, v, pos, paged);
  cpu().kv_write(k, v, pos, contiguous.pages());
  for (int64_t i = 0; i < hkv * hd; ++i)  // sequence 1's slot 37 is row 37 % 16 of its page 37 / 16 (pool page 5)
    BOOST_TEST(at(k_pool, (5 * page + 37 % page) * hkv * hd + i) == at(k, (75 + 37) * hkv * hd + i));
  for (const int64_t t : {int64_t{1}, int64_t{20}})
    for (const int64_t window : {0, 23}) {
      Tensor q = random_tensor({b, t, hq, hd}, 52 + t);
      std::vector<int32_t> at_pos(static_cast<size_t>(b * t));
      for (int64_t i = 0; i < t; ++i) {
        at_pos[static_cast<size_t>(i)] = static_cast<int32_t>(74 - t + 1 + i);
        at_pos[static_cast<size_t>(t + i)] = static_cast<int32_t>(39 - t + 1 + i);
      }
      const AttentionSpec spec{.scale = 0.3f, .window = window};
      Tensor want = cpu().alloc(DType::f32, {b, t, hq * hd}), got = cpu().alloc(DType::f32, {b, t, hq * hd});
      cpu().attention(q, contiguous.pages(), at_pos, spec, want);
      cpu().attention(q, paged, at_pos, spec, got);
      double worst = 0;
      for (int64_t i = 0; i < got.numel(); ++i) worst = std::max<double>(worst, std::fabs(at(got, i) - at(want, i)));
      BOOST_TEST(worst < 1e-5, "t " << t << ", window " << window);
    }
  // A table naming a page outside the pool, or a slot past the table's pages, is refused.
  const std::vector<int32_t> outside = {7, 8, 2, 9, 12, 3, 4, 5, 1, 10};
  Tensor q = random_tensor({b, 1, hq, hd}, 60), out = cpu().alloc(DType::f32, {b, 1, hq * hd});
  const std::vector<int32_t> last = {79, 0}, past = {80, 0};
  BOOST_CHECK_THROW(cpu().attention(q, KvPages{k_pool, v_pool, outside, b}, last, {}, out), std::invalid_argument);
  BOOST_CHECK_THROW(cpu().attention(q, paged, past, {}, out), std::invalid_argument);
}

// A ring (a sliding-window layer's cache) of 3 pages of 8 slots holds the latest 24 positions: a history of 70
// written into it piece by piece, queries that see a window of 10 compute what they compute over the whole
// history; a query whose window reaches past what the ring holds is refused.
BOOST_AUTO_TEST_CASE(a_ring_of_pages_holds_the_window) {
  const int64_t hq = 4, hkv = 2, hd = 16, page = 8, window = 10, length = 70;
  const std::vector<int32_t> table = {4, 1, 2};
  Tensor k_pool = cpu().alloc(DType::f32, {5, page, hkv, hd}), v_pool = cpu().alloc(DType::f32, {5, page, hkv, hd});
  const KvPages ring{k_pool, v_pool, table, 1, true};
  Tensor kc = cpu().alloc(DType::f32, {1, length, hkv, hd}), vc = cpu().alloc(DType::f32, {1, length, hkv, hd});
  ContiguousKv whole(kc, vc);
  Tensor k = random_tensor({1, length, hkv, hd}, 70), v = random_tensor({1, length, hkv, hd}, 71);
  Tensor q = random_tensor({1, length, hq, hd}, 72);
  const AttentionSpec spec{.scale = 0.3f, .window = window};
  const int64_t piece = ring.slots() - window + 1;  // 15: what a step may add beside the window its first query sees
  double worst = 0;
  for (int64_t c0 = 0; c0 < length; c0 += piece) {
    const int64_t c = std::min(piece, length - c0);
    std::vector<int32_t> pos(static_cast<size_t>(c));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(c0));
    auto rows = [&](const Tensor& t, int64_t heads) {
      return t.reshaped({length, heads * hd}).slice_rows(c0, c0 + c).reshaped({1, c, heads, hd});
    };
    cpu().kv_write(rows(k, hkv), rows(v, hkv), pos, ring);
    cpu().kv_write(rows(k, hkv), rows(v, hkv), pos, whole.pages());
    Tensor got = cpu().alloc(DType::f32, {1, c, hq * hd}), want = cpu().alloc(DType::f32, {1, c, hq * hd});
    cpu().attention(rows(q, hq), ring, pos, spec, got);
    cpu().attention(rows(q, hq), whole.pages(), pos, spec, want);
    for (int64_t i = 0; i < got.numel(); ++i) worst = std::max<double>(worst, std::fabs(at(got, i) - at(want, i)));
  }
  BOOST_TEST(worst < 1e-6);
  // Position 69 was written last; a query at 40 would need 31.., which the ring (46..69) no longer holds.
  Tensor q1 = random_tensor({1, 1, hq, hd}, 73), out = cpu().alloc(DType::f32, {1, 1, hq * hd});
  const std::vector<int32_t> positions = {40, 69};
  BOOST_CHECK_THROW(cpu().attention(random_tensor({1, 2, hq, hd}, 74), ring, positions, spec,
                                    out = cpu().alloc(DType::f32, {1, 2, hq * hd})),
                    std::invalid_argument);
  // Without a window every query needs position 0 on: a ring past its slots cannot serve it.
  const std::vector<int32_t> latest = {69};
  BOOST_CHECK_THROW(cpu().attention(q1, ring, latest, {.scale = 0.3f}, out = cpu().alloc(DType::f32, {1, 1, hq * hd})),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(matmul_checks_shapes_and_handles_every_weight_dtype) {
  Tensor x = random_tensor({7, 64}, 9), w = random_tensor({48, 64}, 10);
  Tensor y = cpu().alloc(DType::f32, {7, 48});
  Tensor bad = cpu().alloc(DType::f32, {7, 47});
  BOOST_CHECK_THROW(cpu().matmul(x, w, nullptr, bad), std::invalid_argument);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1}) {
    Tensor wq = w.cast(t), wf = wq.to_f32();
    for (int64_t m : {1, 3, 7}) {
      Tensor xs = x.slice_rows(0, m), ys = y.slice_rows(0, m);
      cpu().matmul(xs, wq, nullptr, ys);
      for (int64_t r = 0; r < m; ++r) {
        // Quantized weights take x rounded to 8 bits (kernels/cpu/matvec.hpp) in batches this small.
        std::vector<float> xr(xs.data_as<float>() + r * 64, xs.data_as<float>() + r * 64 + 64);
        if (is_quantized(t)) xr = corolla::test::activations_as_quantized(xr.data(), 64);
        for (int64_t c = 0; c < 48; ++c) {
          double want = 0;
          for (int64_t i = 0; i < 64; ++i) want += double(xr[static_cast<size_t>(i)]) * at(wf, c * 64 + i);
          BOOST_TEST(std::fabs(at(ys, r * 48 + c) - want) < 1e-4, dtype_name(t) << " m=" << m);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(matmul_many_equals_one_matmul_per_weight) {
  // Weights of unequal row counts (not multiples of the 16-row chunks) and dtypes, with and without bias, for row
  // counts on the matrix-vector path (1, 3) and the GEMM path (80).
  const int64_t k = 64;
  Tensor x = random_tensor({80, k}, 30);
  Tensor wa = random_tensor({40, k}, 31).cast(DType::bf16), wb = random_tensor({23, k}, 32);
  Tensor wc = random_tensor({57, k}, 33).cast(DType::q8_0), bias_b = random_tensor({23}, 34);
  const std::array<const Tensor*, 3> ws{&wa, &wb, &wc}, biases{nullptr, &bias_b, nullptr};
  for (int64_t m : {1, 3, 80}) {
    Tensor xs = x.slice_rows(0, m);
    std::array<Tensor, 3> many, one;
    for (size_t i = 0; i < 3; ++i) {
      many[i] = cpu().alloc(DType::f32, {m, ws[i]->dim(0)});
      one[i] = cpu().alloc(DType::f32, {m, ws[i]->dim(0)});
      cpu().matmul(xs, *ws[i], biases[i], one[i]);
    }
    const std::array<Tensor*, 3> ys{&many[0], &many[1], &many[2]};
    cpu().matmul_many(xs, ws, biases, ys);
    for (size_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < many[i].numel(); ++j)
        BOOST_REQUIRE_MESSAGE(at(many[i], j) == at(one[i], j), "m=" << m << " weight " << i << " value " << j);
  }
  Tensor wrong = cpu().alloc(DType::f32, {1, 22});
  const std::array<Tensor*, 3> bad{&wrong, &wrong, &wrong};
  BOOST_CHECK_THROW(cpu().matmul_many(x.slice_rows(0, 1), ws, biases, bad), std::invalid_argument);
}

// Weights placed with rows interleaved by 16 read x prepared once for the whole product (matvec.hpp): weights of
// formats with different prepared forms (q4_1, q4_0 and q6_K store their levels with different offsets) in one
// product, split over the pool, give exactly what each weight's kernel gives alone in one call, for row counts
// prepared in the caller (1, 3) and split over the pool (9, 40).
BOOST_AUTO_TEST_CASE(matmul_many_prepares_x_once_for_interleaved_weights) {
  const int64_t k = 512;
  Tensor x = random_tensor({40, k}, 40);
  std::vector<Tensor> ws;
  for (auto [plain, n] : {std::pair{DType::q4_1, int64_t{48}}, {DType::q6_K, 32}, {DType::q4_0, 80}}) {
    Tensor stored = random_tensor({n, k}, static_cast<uint32_t>(41 + n)).cast(plain);
    ws.push_back(cpu().alloc(*interleaved_form(plain), {n, k}));
    interleave_rows(plain, stored.data(), ws.back().data(), n, k);
  }
  const std::array<const Tensor*, 3> wp{&ws[0], &ws[1], &ws[2]}, biases{nullptr, nullptr, nullptr};
  const MatvecKernels& kernels = best_matvec_kernels();
  for (int64_t m : {1, 3, 9, 40}) {
    Tensor xs = x.slice_rows(0, m);
    std::array<Tensor, 3> many, alone;
    for (size_t i = 0; i < 3; ++i) {
      const int64_t n = ws[i].dim(0);
      many[i] = cpu().alloc(DType::f32, {m, n});
      alone[i] = cpu().alloc(DType::f32, {m, n});
      kernels.rows_for_dtype(ws[i].dtype())(ws[i].data(), k, xs.data_as<const float>(), m, alone[i].data_as<float>(), n,
                                            0, n);
    }
    const std::array<Tensor*, 3> ys{&many[0], &many[1], &many[2]};
    cpu().matmul_many(xs, wp, biases, ys);
    for (size_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < many[i].numel(); ++j)
        BOOST_REQUIRE_MESSAGE(at(many[i], j) == at(alone[i], j), "m=" << m << " weight " << i << " value " << j);
  }
}

// Decode over a long cache: each token's query heads sharing a KV head run as one block (TinyLlama's 8 per KV
// head, sequences at different depths); with a single KV head the group is split between the threads.
BOOST_AUTO_TEST_CASE(decode_attention_by_head_group_matches_naive) {
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{32, 4}, {6, 1}}) {
    const int64_t b = 2, hd = 64, slots = 700;
    Tensor kc = random_tensor({b, slots, hkv, hd}, 30), vc = random_tensor({b, slots, hkv, hd}, 31);
    Tensor q = random_tensor({b, 1, hq, hd}, 32);
    const std::vector<int32_t> pos = {699, 123};
    Tensor out = cpu().alloc(DType::f32, {b, 1, hq * hd});
    for (const int64_t window : {0, 200})  // a window shorter than one sequence's history, longer than the other's
      for (const float softcap : {0.f, 0.5f}) {
        const AttentionSpec spec{.scale = 0.125f, .window = window, .softcap = softcap};
        ContiguousKv cache(kc, vc);
        cpu().attention(q, cache.pages(), pos, spec, out);
        BOOST_TEST(worst_error_vs_naive(q, kc, vc, pos, spec, out) < 1e-5,
                   "hq " << hq << ", hkv " << hkv << ", window " << window << ", cap " << softcap);
      }
  }
}

// A decode token's attention is the same bits alone as in a batch of any size (a batch's decode steps are one call,
// whose work is split by the batch's size): sequences of different depths, each alone and all eight together.
BOOST_AUTO_TEST_CASE(a_decode_tokens_attention_is_the_same_alone_and_in_a_batch) {
  for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{9, 3}, {32, 4}, {6, 1}}) {
    const int64_t b = 8, hd = 64, slots = 300;
    Tensor kc = random_tensor({b, slots, hkv, hd}, 50), vc = random_tensor({b, slots, hkv, hd}, 51);
    Tensor q = random_tensor({b, 1, hq, hd}, 52);
    const std::vector<int32_t> pos = {299, 5, 64, 130, 0, 77, 200, 16};
    Tensor out = cpu().alloc(DType::f32, {b, 1, hq * hd});
    ContiguousKv cache(kc, vc);
    const AttentionSpec spec{.scale = 0.125f};
    cpu().attention(q, cache.pages(), pos, spec, out);
    for (int64_t i = 0; i < b; ++i) {
      Tensor one = cpu().alloc(DType::f32, {1, 1, hq * hd});
      const std::vector<int32_t> one_pos = {pos[static_cast<size_t>(i)]};
      cpu().attention(q.slice_rows(i, i + 1), cache.pages().sequence(i), one_pos, spec, one);
      for (int64_t j = 0; j < hq * hd; ++j)
        BOOST_REQUIRE_MESSAGE(at(one, j) == at(out, i * hq * hd + j), "hq " << hq << ", sequence " << i << ", " << j);
    }
  }
}

// An f16 KV cache (kv_cache_dtype = "f16"): kv_write rounds each key and value to f16, and attention over it (decode
// by the own products, prefill by oneDNN's sgemm over widened runs, pages scattered over the pool) equals attention
// over an f32 cache holding the same rounded values.
BOOST_AUTO_TEST_CASE(attention_over_an_f16_cache_equals_attention_over_its_values_in_f32) {
  const int64_t hq = 9, hkv = 3, hd = 64, pages = 12, page = 16, b = 2, slots = 80;
  const Shape pool_shape{pages, page, hkv, hd};
  const Tensor k32 = cpu().alloc(DType::f32, pool_shape), v32 = cpu().alloc(DType::f32, pool_shape);
  const Tensor k16 = cpu().alloc(DType::f16, pool_shape), v16 = cpu().alloc(DType::f16, pool_shape);
  // Both caches' pages in the same scattered order: sequence 0 in pages 7, 2, 9, 4, 11, sequence 1 in 0, 5, 1, 8, 3.
  const std::vector<int32_t> table = {7, 2, 9, 4, 11, 0, 5, 1, 8, 3};
  const KvPages p32{k32, v32, table, b}, p16{k16, v16, table, b};
  const Tensor k = random_tensor({b, slots, hkv, hd}, 60), v = random_tensor({b, slots, hkv, hd}, 61);
  std::vector<int32_t> all(static_cast<size_t>(b * slots));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i % slots);
  Tensor k_rounded = k.clone(), v_rounded = v.clone();
  for (int64_t i = 0; i < k.numel(); ++i) {
    k_rounded.data_as<float>()[i] = f16_to_f32(f32_to_f16(at(k, i)));
    v_rounded.data_as<float>()[i] = f16_to_f32(f32_to_f16(at(v, i)));
  }
  cpu().kv_write(k_rounded, v_rounded, all, p32);
  cpu().kv_write(k, v, all, p16);
  for (int64_t s = 0; s < slots; ++s)  // the f16 pool holds the rounded values
    for (int64_t j = 0; j < hkv * hd; ++j)
      BOOST_REQUIRE(f16_to_f32(k16.data_as<const uint16_t>()[p16.row(1, s) * hkv * hd + j]) ==
                    at(k_rounded, (slots + s) * hkv * hd + j));
  const AttentionSpec spec{.scale = 0.125f};
  for (const int64_t t : {int64_t{1}, int64_t{20}}) {  // a decode step, a prefill chunk
    const Tensor q = random_tensor({b, t, hq, hd}, 62);
    std::vector<int32_t> pos;
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < t; ++j) pos.push_back(static_cast<int32_t>(slots - t + j - 7 * i));
    Tensor want = cpu().alloc(DType::f32, {b, t, hq * hd}), got = cpu().alloc(DType::f32, {b, t, hq * hd});
    cpu().attention(q, p32, pos, spec, want);
    cpu().attention(q, p16, pos, spec, got);
    BOOST_TEST(max_abs_diff_of(got, want) <= 1e-6, "tokens " << t << ": " << max_abs_diff_of(got, want));
  }
  // Pools of unequal dtypes are refused.
  const KvPages mixed{k32, v16, table, b};
  Tensor out = cpu().alloc(DType::f32, {b, 1, hq * hd});
  const Tensor q = random_tensor({b, 1, hq, hd}, 63);
  BOOST_CHECK_THROW(cpu().attention(q, mixed, std::vector<int32_t>{5, 5}, spec, out), std::invalid_argument);
}

// A mixture of experts gathers the rows routed to an expert and adds the expert's output back, weighted.
BOOST_AUTO_TEST_CASE(gather_rows_and_weighted_scatter_add) {
  const Tensor x = random_tensor({5, 7}, 40);
  const std::vector<int32_t> rows = {4, 0, 2};
  Tensor g = cpu().alloc(DType::f32, {3, 7});
  cpu().gather_rows(x, rows, g);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 7; ++j) BOOST_TEST(at(g, i * 7 + j) == at(x, rows[static_cast<size_t>(i)] * 7 + j));
  Tensor out = x.clone();
  const std::vector<float> scale = {0.5f, -2.f, 1.f};
  cpu().scatter_add_rows(g, rows, scale, out);
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t j = 0; j < 7; ++j) {
      float want = at(x, r * 7 + j);
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i] == r) want += scale[i] * at(x, r * 7 + j);
      BOOST_TEST(std::fabs(at(out, r * 7 + j) - want) < 1e-6);
    }
  const std::vector<int32_t> outside = {5};
  Tensor one = cpu().alloc(DType::f32, {1, 7});
  BOOST_CHECK_THROW(cpu().gather_rows(x, outside, one), std::invalid_argument);
  const std::vector<float> one_scale = {1.f};
  BOOST_CHECK_THROW(cpu().scatter_add_rows(one, outside, one_scale, out), std::invalid_argument);
  BOOST_CHECK_THROW(cpu().scatter_add_rows(g, rows, one_scale, out), std::invalid_argument);  // a scale per row
}
