// The CUDA backend against the CPU backend, operation by operation, on random inputs. Exits with 77 (skipped)
// when this machine has no CUDA GPU.
#define BOOST_TEST_MODULE cuda_backend
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

using namespace corolla;

namespace {

Backend& cpu() {
  static std::unique_ptr<Backend> b = make_cpu_backend(2);
  return *b;
}

Backend& gpu() {
  static std::unique_ptr<Backend> b = make_backend("cuda");
  return *b;
}

Tensor random_tensor(Shape shape, uint32_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(DType::f32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, scale);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

Tensor up(const Tensor& host) { return gpu().upload(host); }

// Largest |got - want| relative to the largest |want|.
void expect_close(const Tensor& got_device, const Tensor& want, double tol, const std::string& what) {
  const Tensor got = gpu().download(got_device);
  BOOST_REQUIRE_MESSAGE(got.numel() == want.numel(), what << ": " << got.describe() << " vs " << want.describe());
  const float* g = got.data_as<const float>();
  const float* w = want.data_as<const float>();
  double max_ref = 0, max_err = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(w[i])));
    double err = std::fabs(static_cast<double>(g[i]) - w[i]);
    if (std::isnan(err)) err = INFINITY;
    if (err > max_err) max_err = err, worst = i;
  }
  BOOST_TEST(max_err <= tol * std::max(max_ref, 1e-30), what << ": max error " << max_err << " at " << worst << " (got "
                                                             << g[worst] << ", want " << w[worst] << ", max |ref| "
                                                             << max_ref << ", tolerance " << tol << " relative)");
}

std::string dt(DType t) { return std::string(dtype_name(t)); }

// Tolerance of the matmul paths (see kernels/cuda/cuda_backend.cu): the matrix-vector path (m ≤ 4) does the CPU's
// arithmetic; the cuBLAS path keeps about 16 bits of each activation for 16-bit weights (hi + lo) and runs
// quantized weights dequantized to f32.
constexpr double kMatmulTolerance = 1e-4;

// The weights the CPU reference multiplies: quantized ones dequantized to f32, since the CPU's own matrix-vector
// kernels round the activations to 8 bits for them (kernels/cpu/matvec.hpp) and the CUDA kernels keep f32.
Tensor reference_weights(const Tensor& w) { return is_quantized(w.dtype()) ? w.to_f32() : w; }

void check_matmul(Backend& backend, DType wt, int64_t m, int64_t n, int64_t k, bool bias, uint32_t seed, double tol) {
  const Tensor x = random_tensor({m, k}, seed);
  const Tensor w = random_tensor({n, k}, seed + 1, 1.f / std::sqrt(static_cast<float>(k))).cast(wt);
  const Tensor b = random_tensor({n}, seed + 2);
  Tensor want = Tensor::empty(DType::f32, {m, n});
  cpu().matmul(x, reference_weights(w), bias ? &b : nullptr, want);
  const Tensor bd = backend.upload(b);
  Tensor got = backend.alloc(DType::f32, {m, n});
  backend.matmul(backend.upload(x), backend.upload(w), bias ? &bd : nullptr, got);
  std::ostringstream what;
  what << "matmul " << dt(wt) << " m=" << m << " n=" << n << " k=" << k << (bias ? " +bias" : "") << " on "
       << backend.name();
  expect_close(got, want, tol, what.str());
}

const DType kWeightTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1};

}  // namespace

BOOST_AUTO_TEST_CASE(reports_a_cuda_device) {
  BOOST_TEST((gpu().device() == Device::cuda));
  BOOST_TEST_MESSAGE("backend: " << gpu().name());
  for (DType t : kWeightTypes) BOOST_TEST(gpu().supports_weight(t));
  // No CUDA decoder for q5_0 / q5_1 and the K-quants: such a file is refused by load_matrix (or converted by --dtype).
  for (DType t : {DType::q5_0, DType::q5_1, DType::q4_K, DType::q5_K, DType::q6_K})
    BOOST_TEST(!gpu().supports_weight(t));
}

BOOST_AUTO_TEST_CASE(upload_download_round_trips_every_dtype) {
  std::mt19937 rng(1);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::i32, DType::i64}) {
    Tensor h = Tensor::empty(t, {3, 64});
    auto* bytes = static_cast<uint8_t*>(h.data());
    for (int64_t i = 0; i < h.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
    const Tensor d = gpu().upload(h);
    BOOST_TEST((d.device() == Device::cuda));
    BOOST_TEST((d.dtype() == t));
    BOOST_TEST((d.shape() == h.shape()));
    const Tensor back = gpu().download(d);
    BOOST_TEST((back.device() == Device::cpu));
    BOOST_TEST(std::memcmp(back.data(), h.data(), static_cast<size_t>(h.nbytes())) == 0, dt(t));
  }
}

BOOST_AUTO_TEST_CASE(alloc_is_zero_filled) {
  const Tensor z = gpu().download(gpu().alloc(DType::f32, {17, 33}));
  for (int64_t i = 0; i < z.numel(); ++i) BOOST_REQUIRE(z.data_as<const float>()[i] == 0.f);
  const Tensor e = gpu().alloc(DType::f32, {0, 8});
  BOOST_TEST(e.numel() == 0);
}

BOOST_AUTO_TEST_CASE(matmul_matches_cpu_for_every_weight_dtype_and_row_count) {
  uint32_t seed = 100;
  for (DType wt : kWeightTypes)
    for (int64_t m : {1, 2, 3, 4, 5, 16, 33})
      check_matmul(gpu(), wt, m, 72, 256, m % 2 == 1, seed += 10, kMatmulTolerance);
}

BOOST_AUTO_TEST_CASE(matmul_at_model_shapes) {
  // TinyLlama's projections: every rows-per-block split of the matrix-vector kernel.
  for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 2048}, {2048, 2048}, {5632, 2048}, {2048, 5632}})
    for (DType wt : {DType::bf16, DType::q4_0})
      for (int64_t m : {1, 4, 64})
        check_matmul(gpu(), wt, m, n, k, false, static_cast<uint32_t>(n + k + m), kMatmulTolerance);
}

BOOST_AUTO_TEST_CASE(matmul_with_odd_k_or_misaligned_x_takes_the_scalar_path) {
  for (DType wt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t m : {1, 3}) check_matmul(gpu(), wt, m, 40, 37, true, 7, 1e-4);
  // x starts 4 bytes into a buffer: k is a multiple of 8 but float4 loads would be misaligned.
  const int64_t k = 64, n = 24;
  const Tensor xs = random_tensor({1 + k}, 8);
  const Tensor x = Tensor::view(xs.data_as<float>() + 1, DType::f32, {1, k}, xs.owner());
  for (DType wt : kWeightTypes) {
    const Tensor w = random_tensor({n, k}, 9).cast(wt);
    Tensor want = Tensor::empty(DType::f32, {1, n});
    cpu().matmul(x, reference_weights(w), nullptr, want);
    const Tensor xd = gpu().upload(xs);
    const Tensor xv = Tensor::view(static_cast<float*>(xd.data()) + 1, DType::f32, {1, k}, xd.owner(), Device::cuda);
    Tensor got = gpu().alloc(DType::f32, {1, n});
    gpu().matmul(xv, gpu().upload(w), nullptr, got);
    expect_close(got, want, 1e-4, "matmul with misaligned x, " + dt(wt));
  }
}

BOOST_AUTO_TEST_CASE(quantized_prefill_spans_several_dequantization_tiles) {
  // 32 MiB of f16 holds 2048 rows of k = 8192: 3000 rows take two tiles.
  check_matmul(gpu(), DType::q8_0, 6, 3000, 8192, true, 11, kMatmulTolerance);
}

BOOST_AUTO_TEST_CASE(matmul_through_cublas_for_decode_rows) {
  setenv("COROLLA_CUDA_MATVEC", "cublas", 1);
  std::unique_ptr<Backend> b = make_backend("cuda");
  unsetenv("COROLLA_CUDA_MATVEC");
  BOOST_TEST(b->name().find("cuBLAS") != std::string::npos, b->name());
  for (DType wt : kWeightTypes) check_matmul(*b, wt, 1, 72, 256, true, 12, kMatmulTolerance);
}

BOOST_AUTO_TEST_CASE(matmul_many_matches_cpu_in_one_launch_and_falls_back_otherwise) {
  for (int64_t m : {1, 3, 6}) {
    for (DType wt : {DType::bf16, DType::q8_0}) {
      const Tensor x = random_tensor({m, 256}, 400);
      const Tensor wa = random_tensor({96, 256}, 401, 0.06f).cast(wt),
                   wb = random_tensor({32, 256}, 402, 0.06f).cast(wt);
      const Tensor wc = random_tensor({200, 256}, 403, 0.06f).cast(wt), bias = random_tensor({32}, 404);
      Tensor ya = Tensor::empty(DType::f32, {m, 96}), yb = Tensor::empty(DType::f32, {m, 32});
      Tensor yc = Tensor::empty(DType::f32, {m, 200});
      cpu().matmul(x, reference_weights(wa), nullptr, ya);
      cpu().matmul(x, reference_weights(wb), &bias, yb);
      cpu().matmul(x, reference_weights(wc), nullptr, yc);
      const Tensor da = up(wa), db = up(wb), dc = up(wc), dbias = up(bias);
      Tensor ga = gpu().alloc(DType::f32, {m, 96}), gb = gpu().alloc(DType::f32, {m, 32});
      Tensor gc = gpu().alloc(DType::f32, {m, 200});
      const Tensor* ws[] = {&da, &db, &dc};
      const Tensor* bs[] = {nullptr, &dbias, nullptr};
      Tensor* ys[] = {&ga, &gb, &gc};
      gpu().matmul_many(up(x), ws, bs, ys);
      const std::string what = "matmul_many " + dt(wt) + " m=" + std::to_string(m);
      expect_close(ga, ya, kMatmulTolerance, what + " first");
      expect_close(gb, yb, kMatmulTolerance, what + " second, with bias");
      expect_close(gc, yc, kMatmulTolerance, what + " third");
    }
  }
}

BOOST_AUTO_TEST_CASE(matmul_add_adds_the_projection_to_y_on_both_paths) {
  for (int64_t m : {1, 4, 9}) {
    for (DType wt : {DType::f32, DType::bf16, DType::q4_0}) {
      const Tensor x = random_tensor({m, 128}, 410), y0 = random_tensor({m, 64}, 411), bias = random_tensor({64}, 412);
      const Tensor w = random_tensor({64, 128}, 413, 0.09f).cast(wt);
      Tensor want = y0.clone();
      cpu().matmul_add(x, reference_weights(w), &bias, want);
      Tensor got = up(y0);
      const Tensor dbias = up(bias);
      gpu().matmul_add(up(x), up(w), &dbias, got);
      expect_close(got, want, kMatmulTolerance, "matmul_add " + dt(wt) + " m=" + std::to_string(m));
    }
  }
}

BOOST_AUTO_TEST_CASE(norms_match_cpu) {
  for (int64_t d : {100, 2048}) {
    const Tensor x = random_tensor({7, d}, 20, 3.f);
    const Tensor w = random_tensor({d}, 21);
    const Tensor b = random_tensor({d}, 22);
    Tensor want = Tensor::empty(DType::f32, {7, d});
    cpu().rms_norm(x, w, 1e-5f, want);
    Tensor got = gpu().alloc(DType::f32, {7, d});
    gpu().rms_norm(up(x), up(w), 1e-5f, got);
    expect_close(got, want, 1e-5, "rms_norm d=" + std::to_string(d));
    Tensor in_place = up(x);
    gpu().rms_norm(in_place, up(w), 1e-5f, in_place);
    expect_close(in_place, want, 1e-5, "rms_norm in place");

    cpu().layer_norm(x, w, b, 1e-5f, want);
    gpu().layer_norm(up(x), up(w), up(b), 1e-5f, got);
    expect_close(got, want, 1e-4, "layer_norm d=" + std::to_string(d));
  }
}

BOOST_AUTO_TEST_CASE(rope_matches_cpu) {
  for (int64_t hd : {64, 128}) {
    std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = 1.f / std::pow(10000.f, 2.f * static_cast<float>(i) / static_cast<float>(hd));
    const std::vector<int32_t> positions = {0, 1, 7, 100, 8000};
    Tensor want = random_tensor({5, 6, hd}, 30);
    Tensor got = up(want);
    cpu().rope(want, positions, inv_freq);
    gpu().rope(got, positions, inv_freq);
    expect_close(got, want, 1e-5, "rope head_dim=" + std::to_string(hd));
  }
  // Phi-3's partial rotary: the first 2·half values turn, scaled by the attention factor; the rest pass as they are.
  for (int64_t half : {1, 24}) {
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.f, -static_cast<float>(i) / 24.f);
    const std::vector<int32_t> positions = {0, 3, 4000};
    Tensor want = random_tensor({3, 4, 64}, 32);
    Tensor got = up(want);
    cpu().rope(want, positions, inv_freq, 1.19f);
    gpu().rope(got, positions, inv_freq, 1.19f);
    expect_close(got, want, 1e-5, "partial rope half=" + std::to_string(half));
  }
  Tensor x = gpu().alloc(DType::f32, {1, 1, 4});
  const std::vector<int32_t> one = {0};
  BOOST_CHECK_THROW(gpu().rope(x, one, std::vector<float>{1.f, 1.f, 1.f}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(rope_arguments_survive_many_calls) {
  // Thousands of distinct position arrays wrap the argument ring several times; repeated ones are reused.
  // Large frequencies: a stale or misplaced position would rotate by a visibly different angle.
  const std::vector<float> inv_freq = {0.5f, 0.05f};
  Tensor want = random_tensor({1, 2, 4}, 31);
  Tensor got = up(want);
  for (int32_t i = 0; i < 6000; ++i) {
    const std::vector<int32_t> pos = {i % 3 == 0 ? 5 : i};
    cpu().rope(want, pos, inv_freq);
    gpu().rope(got, pos, inv_freq);
  }
  expect_close(got, want, 1e-3, "rope after 6000 calls");
}

BOOST_AUTO_TEST_CASE(rope_kv_write_matches_rope_and_kv_write_on_the_cpu) {
  struct Case {
    int64_t b, t, hq, hkv, hd, slots;
    std::vector<int32_t> positions;
    int64_t half;  // frequencies: hd / 2, or fewer with partial rotary
  };
  // The last case turns 3/4 of each head (Phi-4-mini's partial rotary): k's other values reach the cache unturned.
  for (const Case& c : {Case{1, 1, 32, 4, 64, 4096, {3000}, 32}, Case{2, 3, 8, 2, 80, 16, {0, 1, 2, 7, 8, 9}, 40},
                        Case{1, 2, 8, 2, 64, 8, {5, 6}, 24}}) {
    const int64_t m = c.b * c.t;
    Tensor q = random_tensor({m, c.hq, c.hd}, 360), k = random_tensor({m, c.hkv, c.hd}, 361);
    const Tensor v = random_tensor({m, c.hkv, c.hd}, 362);
    Tensor kc = random_tensor({c.b, c.slots, c.hkv, c.hd}, 363), vc = random_tensor({c.b, c.slots, c.hkv, c.hd}, 364);
    std::vector<float> inv_freq;
    for (int64_t i = 0; i < c.half; ++i) inv_freq.push_back(std::pow(10000.f, -static_cast<float>(i) / c.half));
    Tensor qd = up(q), kd = up(k), kcd = up(kc), vcd = up(vc);
    ContiguousKv host_cache(kc, vc), device_cache(kcd, vcd);
    cpu().rope_kv_write(q, k, v, c.positions, inv_freq, host_cache.pages());
    gpu().rope_kv_write(qd, kd, up(v), c.positions, inv_freq, device_cache.pages());
    const std::string what = "rope_kv_write b=" + std::to_string(c.b) + " t=" + std::to_string(c.t);
    expect_close(qd, q, 1e-5, what + " q");
    expect_close(kd, k, 1e-5, what + " k");
    expect_close(kcd, kc, 1e-5, what + " k cache");
    expect_close(vcd, vc, 0, what + " v cache");
  }
  Tensor q = gpu().alloc(DType::f32, {1, 2, 4}), k = gpu().alloc(DType::f32, {1, 1, 4});
  Tensor kc = gpu().alloc(DType::f32, {1, 4, 1, 4}), vc = gpu().alloc(DType::f32, {1, 4, 1, 4});
  const std::vector<int32_t> outside = {4};
  const std::vector<float> inv_freq = {1.f, 0.5f};
  ContiguousKv cache(kc, vc);
  BOOST_CHECK_THROW(gpu().rope_kv_write(q, k, k, outside, inv_freq, cache.pages()), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(elementwise_ops_match_cpu) {
  const Tensor g = random_tensor({3, 1000}, 40, 4.f);
  const Tensor u = random_tensor({3, 1000}, 41);
  Tensor want = Tensor::empty(DType::f32, {3, 1000});
  Tensor got = gpu().alloc(DType::f32, {3, 1000});
  cpu().silu_mul(g, u, want);
  gpu().silu_mul(up(g), up(u), got);
  expect_close(got, want, 1e-5, "silu_mul");
  cpu().gelu_mul(g, u, Gelu::tanh, want);
  Tensor gu = up(u);
  gpu().gelu_mul(up(g), gu, Gelu::tanh, gu);  // out aliases up
  expect_close(gu, want, 1e-5, "gelu_mul");

  cpu().add(g, u, want);
  Tensor a = up(g);
  gpu().add(a, up(u), a);  // out aliases a
  expect_close(a, want, 1e-6, "add in place");

  for (int64_t d : {7, 50000}) {
    Tensor sw = random_tensor({3, d}, 42, 5.f);
    Tensor sg = up(sw);
    cpu().softmax(sw);
    gpu().softmax(sg);
    // Sums of up to 50000 exponentials in another order: about sqrt(d) roundings of 6e-8 apart.
    expect_close(sg, sw, 5e-5, "softmax d=" + std::to_string(d));
  }
}

BOOST_AUTO_TEST_CASE(embed_matches_cpu_for_every_table_dtype) {
  const std::vector<int32_t> ids = {3, 0, 49, 3};
  for (DType t : kWeightTypes) {
    const Tensor table = random_tensor({50, 64}, 50).cast(t);
    Tensor want = Tensor::empty(DType::f32, {4, 64});
    for (float scale : {1.0f, 8.0f}) {  // 8: Gemma's √hidden for 64
      cpu().embed(table, ids, scale, want);
      Tensor got = gpu().alloc(DType::f32, {4, 64});
      gpu().embed(up(table), ids, scale, got);
      expect_close(got, want, 1e-6 * scale, "embed " + dt(t) + " scale " + std::to_string(scale));
    }
  }
}

namespace {

// kv_write of new tokens into random caches, then attention, on both backends. With `page_tokens` > 0 the caches
// are pages of that many tokens scattered over a pool (a server's session caches), the same table on both.
void check_attention(int64_t b, int64_t t, int64_t hq, int64_t hkv, int64_t hd, int64_t slots,
                     const std::vector<int32_t>& positions, uint32_t seed, int64_t window = 0, float softcap = 0,
                     int64_t page_tokens = 0) {
  const int64_t page = page_tokens > 0 ? page_tokens : slots;
  const int64_t per_sequence = (slots + page - 1) / page, pages = page_tokens > 0 ? b * per_sequence + 3 : b;
  std::vector<int32_t> table(static_cast<size_t>(pages));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  if (page_tokens > 0) std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  table.resize(static_cast<size_t>(b * per_sequence));
  Tensor kc = random_tensor({pages, page, hkv, hd}, seed);
  Tensor vc = random_tensor({pages, page, hkv, hd}, seed + 1);
  const Tensor k = random_tensor({b, t, hkv, hd}, seed + 2);
  const Tensor v = random_tensor({b, t, hkv, hd}, seed + 3);
  const Tensor q = random_tensor({b, t, hq, hd}, seed + 4);
  Tensor kcd = up(kc), vcd = up(vc);
  const KvPages host{kc, vc, table, b}, device{kcd, vcd, table, b};
  cpu().kv_write(k, v, positions, host);
  gpu().kv_write(up(k), up(v), positions, device);
  std::ostringstream what;
  what << "b=" << b << " t=" << t << " hq=" << hq << " hkv=" << hkv << " hd=" << hd << " slots=" << slots
       << " pages of " << page;
  expect_close(kcd, kc, 0, "kv_write k, " + what.str());
  expect_close(vcd, vc, 0, "kv_write v, " + what.str());

  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  Tensor want = Tensor::empty(DType::f32, {b, t, hq * hd});
  const AttentionSpec spec{.scale = scale, .window = window, .softcap = softcap};
  cpu().attention(q, host, positions, spec, want);
  Tensor got = gpu().alloc(DType::f32, {b, t, hq * hd});
  gpu().attention(up(q), device, positions, spec, got);
  expect_close(got, want, 1e-4,
               "attention " + what.str() + " window=" + std::to_string(window) + " softcap=" + std::to_string(softcap));
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_with_gqa_and_several_positions) {
  check_attention(2, 3, 8, 2, 64, 40, {5, 6, 7, 10, 11, 12}, 60);
  check_attention(1, 4, 4, 4, 64, 16, {0, 1, 2, 3}, 61);  // multi-head, first slots
  check_attention(1, 2, 6, 3, 80, 64, {62, 63}, 62);      // head_dim not a multiple of 32, last slot
  check_attention(1, 1, 4, 1, 256, 100, {37}, 63);        // largest head_dim
  check_attention(1, 1, 2, 1, 32, 9, {8}, 64);
  check_attention(1, 3, 32, 4, 64, 64, {0, 1, 2}, 65);  // TinyLlama's heads
}

BOOST_AUTO_TEST_CASE(attention_over_a_long_cache) {
  check_attention(1, 1, 4, 1, 128, 8192, {8191}, 70);
  check_attention(1, 1, 4, 1, 64, 8192, {5}, 74);  // most parts of the split cache hold no slot
  check_attention(1, 1, 32, 4, 64, 4096, {1000}, 75);
  check_attention(1, 2, 8, 2, 64, 10000, {4000, 9999}, 71);
}

BOOST_AUTO_TEST_CASE(attention_in_a_sliding_window) {
  check_attention(1, 2, 8, 2, 64, 10000, {4000, 9999}, 72, 4096);  // Mistral's window, one history shorter
  check_attention(2, 3, 8, 2, 64, 40, {5, 6, 7, 30, 31, 32}, 73, 7);
}

// A server's session caches: pages scattered over a pool, decode and prefill, with a window and split parts.
BOOST_AUTO_TEST_CASE(attention_over_pages_of_a_pool) {
  check_attention(2, 3, 8, 2, 64, 200, {5, 6, 7, 130, 131, 132}, 90, 0, 0, 64);
  check_attention(1, 1, 32, 4, 64, 4096, {3000}, 91, 0, 0, 64);
  check_attention(1, 2, 8, 2, 64, 5000, {4000, 4999}, 92, 1000, 0, 64);
  check_attention(2, 12, 8, 4, 128, 100,
                  {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91}, 93, 0, 0, 16);
}

BOOST_AUTO_TEST_CASE(attention_with_a_soft_cap) {  // Gemma 2's attn_logit_softcapping, small enough to bite
  check_attention(2, 3, 8, 2, 64, 40, {5, 6, 7, 30, 31, 32}, 76, 0, 0.5f);
  check_attention(1, 2, 8, 4, 256, 5000, {4000, 4999}, 77, 4096, 2.0f);  // and a window, split parts
  check_attention(1, 12, 8, 4, 128, 64, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 78, 0, 1.0f);
}

BOOST_AUTO_TEST_CASE(gather_and_scatter_rows_match_cpu) {
  const Tensor x = random_tensor({9, 300}, 120);
  const std::vector<int32_t> rows = {8, 0, 3, 5};
  const std::vector<float> scale = {0.25f, -1.f, 2.f, 0.5f};
  Tensor want = Tensor::empty(DType::f32, {4, 300});
  cpu().gather_rows(x, rows, want);
  Tensor got = gpu().alloc(DType::f32, {4, 300});
  gpu().gather_rows(up(x), rows, got);
  expect_close(got, want, 0, "gather_rows");
  Tensor want_out = x.clone(), got_out = up(x);
  cpu().scatter_add_rows(want, rows, scale, want_out);
  gpu().scatter_add_rows(got, rows, scale, got_out);
  expect_close(got_out, want_out, 1e-6, "scatter_add_rows");
}

BOOST_AUTO_TEST_CASE(matmul_gradients_match_cpu) {
  for (DType t : kWeightTypes)
    for (int64_t m : {1, 37}) {
      // n large enough that quantized weights span several f32 tiles would need ~1 GB; one tile is checked here.
      const int64_t n = 96, k = 160;
      const Tensor w = random_tensor({n, k}, 90, 1.f / std::sqrt(static_cast<float>(k))).cast(t);
      const Tensor dy = random_tensor({m, n}, 91);
      Tensor want = Tensor::empty(DType::f32, {m, k});
      cpu().matmul_backward(dy, w, want);
      Tensor got = gpu().alloc(DType::f32, {m, k});
      gpu().matmul_backward(up(dy), up(w), got);
      expect_close(got, want, 1e-5, "matmul_backward " + dt(t) + " m=" + std::to_string(m));
    }
  const Tensor dy = random_tensor({33, 20}, 92), x = random_tensor({33, 48}, 93), dw0 = random_tensor({20, 48}, 94);
  Tensor want = dw0.clone();
  cpu().matmul_weight_grad(dy, x, want);
  Tensor got = up(dw0);
  gpu().matmul_weight_grad(up(dy), up(x), got);
  expect_close(got, want, 1e-5, "matmul_weight_grad");
}

BOOST_AUTO_TEST_CASE(norm_and_mlp_gradients_match_cpu) {
  const Tensor x = random_tensor({5, 300}, 95), w = random_tensor({300}, 96), dy = random_tensor({5, 300}, 97);
  Tensor want = Tensor::empty(DType::f32, {5, 300});
  cpu().rms_norm_backward(x, w, 1e-5f, dy, want);
  Tensor got = gpu().alloc(DType::f32, {5, 300});
  gpu().rms_norm_backward(up(x), up(w), 1e-5f, up(dy), got);
  expect_close(got, want, 1e-5, "rms_norm_backward");

  const Tensor g = random_tensor({3, 1000}, 98, 4.f), u = random_tensor({3, 1000}, 99);
  Tensor want_g = Tensor::empty(DType::f32, g.shape()), want_u = Tensor::empty(DType::f32, g.shape());
  cpu().silu_mul_backward(g, u, random_tensor({3, 1000}, 100), want_g, want_u);
  Tensor got_g = up(random_tensor({3, 1000}, 100)), got_u = gpu().alloc(DType::f32, g.shape());
  gpu().silu_mul_backward(up(g), up(u), got_g, got_g, got_u);  // d_gate aliases d_out
  expect_close(got_g, want_g, 1e-5, "silu_mul_backward d_gate");
  expect_close(got_u, want_u, 1e-5, "silu_mul_backward d_up");
  cpu().gelu_mul_backward(g, u, Gelu::tanh, random_tensor({3, 1000}, 100), want_g, want_u);
  got_g = up(random_tensor({3, 1000}, 100));
  gpu().gelu_mul_backward(up(g), up(u), Gelu::tanh, got_g, got_g, got_u);
  expect_close(got_g, want_g, 1e-5, "gelu_mul_backward d_gate");
  expect_close(got_u, want_u, 1e-5, "gelu_mul_backward d_up");
}

BOOST_AUTO_TEST_CASE(attention_gradients_match_cpu) {
  struct Case {
    int64_t b, t, hq, hkv, hd;
  };
  for (const Case c : {Case{2, 37, 8, 2, 64}, Case{1, 5, 4, 4, 80}, Case{1, 130, 4, 1, 128}, Case{1, 3, 2, 1, 256}})
    for (const int64_t window : {0, 16})
      for (const float softcap : {0.f, 1.f}) {
        const Tensor q = random_tensor({c.b, c.t, c.hq, c.hd}, 101), k = random_tensor({c.b, c.t, c.hkv, c.hd}, 102);
        const Tensor v = random_tensor({c.b, c.t, c.hkv, c.hd}, 103), d = random_tensor({c.b, c.t, c.hq * c.hd}, 104);
        const float scale = 1.f / std::sqrt(static_cast<float>(c.hd));
        Tensor dq = Tensor::empty(DType::f32, q.shape()), dk = Tensor::empty(DType::f32, k.shape());
        Tensor dv = Tensor::empty(DType::f32, v.shape());
        const AttentionSpec spec{.scale = scale, .window = window, .softcap = softcap};
        cpu().attention_backward(q, k, v, d, spec, dq, dk, dv);
        Tensor gq = gpu().alloc(DType::f32, q.shape()), gk = gpu().alloc(DType::f32, k.shape());
        Tensor gv = gpu().alloc(DType::f32, v.shape());
        gpu().attention_backward(up(q), up(k), up(v), up(d), spec, gq, gk, gv);
        const std::string what = "t=" + std::to_string(c.t) + " hd=" + std::to_string(c.hd) +
                                 " window=" + std::to_string(window) + " softcap=" + std::to_string(softcap);
        expect_close(gq, dq, 1e-4, "attention_backward dq " + what);
        expect_close(gk, dk, 1e-4, "attention_backward dk " + what);
        expect_close(gv, dv, 1e-4, "attention_backward dv " + what);
      }
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_invalid_argument) {
  const Tensor w_host = random_tensor({8, 32}, 80);
  Tensor x = up(random_tensor({1, 32}, 81));
  Tensor y = gpu().alloc(DType::f32, {1, 8});
  BOOST_CHECK_THROW(gpu().matmul(x, w_host, nullptr, y), std::invalid_argument);  // weight on the host
  BOOST_CHECK_THROW(gpu().matmul(x, up(random_tensor({8, 16}, 82)), nullptr, y), std::invalid_argument);
  Tensor q = gpu().alloc(DType::f32, {1, 1, 2, 16});
  Tensor kc = gpu().alloc(DType::f32, {1, 4, 1, 16});
  Tensor vc = gpu().alloc(DType::f32, {1, 4, 1, 16});
  Tensor out = gpu().alloc(DType::f32, {1, 1, 32});
  const std::vector<int32_t> outside = {4}, inside = {3}, no_page = {1};
  ContiguousKv cache(kc, vc);
  BOOST_CHECK_THROW(gpu().attention(q, cache.pages(), outside, {.scale = 1.f}, out), std::invalid_argument);
  BOOST_CHECK_THROW(gpu().attention(q, KvPages{kc, vc, no_page, 1}, inside, {.scale = 1.f}, out),
                    std::invalid_argument);  // a page the pool does not have
  Tensor kv = gpu().alloc(DType::f32, {1, 1, 1, 16});
  BOOST_CHECK_THROW(gpu().kv_write(kv, kv, outside, cache.pages()), std::invalid_argument);
  Tensor r = gpu().alloc(DType::f32, {2, 1, 4});
  const std::vector<float> inv_freq = {1.f, 0.5f};
  BOOST_CHECK_THROW(gpu().rope(r, outside, inv_freq), std::invalid_argument);  // one position for two tokens
  Tensor e = gpu().alloc(DType::f32, {1, 32});
  BOOST_CHECK_THROW(gpu().embed(x.reshaped({1, 32}), std::vector<int32_t>{1}, 1.0f, e), std::invalid_argument);
  gpu().synchronize();
}

namespace {

// A decode step of a small attention block on `io` [1, 1, d] with its own KV cache: what a block records.
struct StepOps {
  int64_t d = 64, heads = 4, hd = 16, slots = 32;
  Tensor norm, wq, wk, wv, wo, k_cache, v_cache;
  std::vector<int32_t> table{0};
  std::vector<float> inv_freq;
  explicit StepOps(uint32_t seed) {
    norm = up(random_tensor({d}, seed, 0.5f));
    wq = up(random_tensor({d, d}, seed + 1, 0.2f).cast(DType::bf16));
    wk = up(random_tensor({d, d}, seed + 2, 0.2f).cast(DType::bf16));
    wv = up(random_tensor({d, d}, seed + 3, 0.2f).cast(DType::bf16));
    wo = up(random_tensor({d, d}, seed + 4, 0.2f));
    k_cache = gpu().alloc(DType::f32, {1, slots, heads, hd});
    v_cache = gpu().alloc(DType::f32, {1, slots, heads, hd});
    for (int64_t i = 0; i < hd / 2; ++i) inv_freq.push_back(std::pow(100.f, -2.f * i / hd));
  }
  void run(Tensor& io, std::span<const int32_t> positions) {
    Backend& be = gpu();
    Tensor x = io.reshaped({1, d});
    Tensor n = be.alloc(DType::f32, {1, d}), q = be.alloc(DType::f32, {1, d}), k = be.alloc(DType::f32, {1, d});
    Tensor v = be.alloc(DType::f32, {1, d}), att = be.alloc(DType::f32, {1, 1, d});
    be.rms_norm(x, norm, 1e-5f, n);
    be.matmul(n, wq, nullptr, q);
    be.matmul(n, wk, nullptr, k);
    be.matmul(n, wv, nullptr, v);
    Tensor q3 = q.reshaped({1, heads, hd}), k3 = k.reshaped({1, heads, hd});
    be.rope(q3, positions, inv_freq);
    be.rope(k3, positions, inv_freq);
    const KvPages cache{k_cache, v_cache, table, 1};
    be.kv_write(k.reshaped({1, 1, heads, hd}), v.reshaped({1, 1, heads, hd}), positions, cache);
    be.attention(q.reshaped({1, 1, heads, hd}), cache, positions, {.scale = 0.25f}, att);
    be.matmul(att.reshaped({1, d}), wo, nullptr, n);
    be.add(x, n, x);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_recording_replays_decode_steps_at_new_positions_as_the_operations_compute_them) {
  StepOps eager(300), recorded(300);
  const Tensor first = random_tensor({1, 1, 64}, 310);
  const std::vector<int32_t> p0 = {0};
  std::unique_ptr<Recording> rec =
      gpu().record(up(first), p0, [&](Tensor& io, std::span<const int32_t> p) { recorded.run(io, p); });
  BOOST_REQUIRE(rec);
  for (int32_t pos = 0; pos < 20; ++pos) {
    const Tensor input = random_tensor({1, 1, 64}, 320 + pos);
    const std::vector<int32_t> p = {pos};
    Tensor a = up(input), b = up(input);
    eager.run(a, p);
    rec->replay(b, p);
    expect_close(b, gpu().download(a), 0, "replayed step at position " + std::to_string(pos));
  }
  // The caches were written alike, so attention saw the same history.
  expect_close(recorded.k_cache, gpu().download(eager.k_cache), 0, "k cache after 20 replays");
}

BOOST_AUTO_TEST_CASE(a_recording_of_several_rows_through_cublas_replays_as_launched) {
  const Tensor w = random_tensor({96, 64}, 350, 0.1f).cast(DType::bf16);
  const Tensor wd = up(w), w2 = up(random_tensor({64, 96}, 351, 0.1f));
  auto step = [&](Tensor& io, std::span<const int32_t>) {
    Tensor y = gpu().alloc(DType::f32, {6, 96});
    gpu().matmul(io.reshaped({6, 64}), wd, nullptr, y);  // 6 rows: the cuBLAS path
    gpu().softmax(y);
    Tensor back = gpu().alloc(DType::f32, {6, 64});
    gpu().matmul(y, w2, nullptr, back);
    gpu().add(io.reshaped({6, 64}), back, back);
    gpu().add(back, back, io);
  };
  const std::vector<int32_t> none;
  Tensor first = up(random_tensor({1, 6, 64}, 352));
  auto rec = gpu().record(first, none, step);
  BOOST_REQUIRE(rec);
  for (uint32_t i = 0; i < 3; ++i) {
    const Tensor input = random_tensor({1, 6, 64}, 353 + i);
    Tensor a = up(input), b = up(input);
    step(a, none);
    rec->replay(b, none);
    expect_close(b, gpu().download(a), 0, "replayed cuBLAS step " + std::to_string(i));
  }
}

BOOST_AUTO_TEST_CASE(a_replay_refuses_positions_outside_the_cache_and_other_shapes) {
  StepOps ops(330);
  const std::vector<int32_t> p0 = {3};
  Tensor io = gpu().alloc(DType::f32, {1, 1, 64});
  auto rec = gpu().record(io, p0, [&](Tensor& t, std::span<const int32_t> p) { ops.run(t, p); });
  BOOST_REQUIRE(rec);
  const std::vector<int32_t> beyond = {32}, negative = {-1}, two = {1, 2};
  BOOST_CHECK_THROW(rec->replay(io, beyond), std::invalid_argument);
  BOOST_CHECK_THROW(rec->replay(io, negative), std::invalid_argument);
  BOOST_CHECK_THROW(rec->replay(io, two), std::invalid_argument);
  Tensor other = gpu().alloc(DType::f32, {1, 2, 64});
  BOOST_CHECK_THROW(rec->replay(other, p0), std::invalid_argument);
  const std::vector<int32_t> last = {31};
  rec->replay(io, last);
  gpu().synchronize();
}

BOOST_AUTO_TEST_CASE(what_cannot_be_recorded_is_refused_and_the_backend_goes_on) {
  Tensor io = up(random_tensor({1, 8}, 340));
  const std::vector<int32_t> p0 = {0};
  auto rec = gpu().record(io, p0, [&](Tensor& t, std::span<const int32_t>) {
    gpu().add(t, t, t);
    (void)gpu().download(t);  // waits for the device: not recordable
  });
  BOOST_CHECK(!rec);
  auto throws = gpu().record(io, p0, [&](Tensor&, std::span<const int32_t>) { throw std::runtime_error("no"); });
  BOOST_CHECK(!throws);
  // Nothing of the refused recordings ran, and the stream works.
  Tensor twice = gpu().alloc(DType::f32, {1, 8});
  gpu().add(io, io, twice);
  const Tensor host = gpu().download(io);
  Tensor want = Tensor::empty(DType::f32, {1, 8});
  cpu().add(host, host, want);
  expect_close(twice, want, 0, "add after refused recordings");
}

int main(int argc, char** argv) {
  if (!cuda_available()) {
    std::cout << "test_cuda_backend: SKIPPED, no CUDA GPU found (cudaGetDeviceCount reports none or no driver)\n";
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
