// Decode microbenchmark of the CUDA backend: a TinyLlama-1.1B-shaped stack of 22 Llama blocks (hidden 2048, 32
// query heads / 4 KV heads of 64, intermediate 5632, random bf16 weights) built directly from backend operations.
// Per token and layer, as a Llama block issues them: rms_norm, the q/k/v projections (one matmul_many), rope and
// kv_write (one rope_kv_write), attention, o_proj added to the residual (matmul_add), rms_norm, gate/up (one
// matmul_many), silu_mul, down_proj added to the residual; the hidden state is uploaded before and downloaded after
// each token, as a server does.
//
// Prints tokens/s and the weight bytes read per second against the GPU's peak memory bandwidth
// (cudaDevAttrMemoryClockRate × bus width × 2) and against a device-to-device copy measured in the same run, for:
// decode with each operation launched as called (a server's block actors), with a CUDA graph per layer
// (Backend::record) and with one graph per token (LocalModel); decode with cuBLAS (COROLLA_CUDA_MATVEC=cublas), decode
// at a long context, the matrix-vector kernel alone, and a prefill.
//   bench_cuda_decode [tokens=128]
// Exits with 77 when no CUDA GPU is present.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

using namespace corolla;

namespace {

struct ModelShape {
  const char* name;
  int64_t hidden, layers, heads, kv_heads, head_dim, inter, slots;
};
constexpr ModelShape kTinyLlama{"TinyLlama-1.1B", 2048, 22, 32, 4, 64, 5632, 4096};
constexpr ModelShape kLlama3_8B{"Llama-3-8B", 4096, 32, 32, 8, 128, 14336, 4096};
// The shape the functions below build and run (one model at a time).
ModelShape model_shape = kTinyLlama;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Uniform in [-a, a] with a = sqrt(3 / k) (unit output variance for unit inputs), bf16, from a fast generator.
Tensor random_bf16(int64_t n, int64_t k, uint64_t seed) {
  Tensor t = Tensor::empty(DType::bf16, {n, k});
  auto* p = t.data_as<uint16_t>();
  const float a = std::sqrt(3.f / static_cast<float>(k));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n * k; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const float u = static_cast<float>(s >> 40) / static_cast<float>(1 << 24);  // [0, 1)
    p[i] = f32_to_bf16((2.f * u - 1.f) * a);
  }
  return t;
}

Tensor filled(Shape shape, float v) {
  Tensor t = Tensor::empty(DType::f32, shape);
  std::fill(t.data_as<float>(), t.data_as<float>() + t.numel(), v);
  return t;
}

struct Layer {
  Tensor ln1, ln2, wq, wk, wv, wo, wg, wu, wd, k_cache, v_cache;
};

struct Model {
  std::vector<Layer> layers;
  std::vector<float> inv_freq;
  int64_t weight_bytes = 0;  // matmul weights read per token
};

// A random matrix in `dtype` (bf16, or bf16 values quantized).
Tensor random_weight(int64_t n, int64_t k, uint64_t seed, DType dtype) {
  Tensor t = random_bf16(n, k, seed);
  return dtype == DType::bf16 ? t : t.cast(dtype);
}

Model build(Backend& be, DType dtype = DType::bf16) {
  const auto& m = model_shape;
  const int64_t kv = m.kv_heads * m.head_dim;
  // One host tensor per projection kind; every layer gets its own device copy.
  const Tensor q = random_weight(m.hidden, m.hidden, 1, dtype), k = random_weight(kv, m.hidden, 2, dtype),
               v = random_weight(kv, m.hidden, 3, dtype), o = random_weight(m.hidden, m.hidden, 4, dtype),
               g = random_weight(m.inter, m.hidden, 5, dtype), u = random_weight(m.inter, m.hidden, 6, dtype),
               d = random_weight(m.hidden, m.inter, 7, dtype);
  const Tensor ones = filled({m.hidden}, 1.f);
  Model model;
  for (int64_t l = 0; l < m.layers; ++l) {
    Layer L;
    L.ln1 = be.upload(ones), L.ln2 = be.upload(ones);
    L.wq = be.upload(q), L.wk = be.upload(k), L.wv = be.upload(v), L.wo = be.upload(o);
    L.wg = be.upload(g), L.wu = be.upload(u), L.wd = be.upload(d);
    L.k_cache = be.alloc(DType::f32, {1, m.slots, m.kv_heads, m.head_dim});
    L.v_cache = be.alloc(DType::f32, {1, m.slots, m.kv_heads, m.head_dim});
    for (const Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd}) model.weight_bytes += w->nbytes();
    model.layers.push_back(std::move(L));
  }
  for (int64_t i = 0; i < m.head_dim / 2; ++i)
    model.inv_freq.push_back(1.f / std::pow(10000.f, 2.f * static_cast<float>(i) / static_cast<float>(m.head_dim)));
  be.synchronize();
  return model;
}

// Activations of one forward pass of t tokens.
struct Scratch {
  Tensor x, h, q, k, v, attn, o, gate, up;
  Scratch(Backend& be, int64_t t) {
    const auto& m = model_shape;
    x = be.alloc(DType::f32, {t, m.hidden}), h = be.alloc(DType::f32, {t, m.hidden});
    q = be.alloc(DType::f32, {t, m.hidden}), attn = be.alloc(DType::f32, {t, m.hidden});
    o = be.alloc(DType::f32, {t, m.hidden});
    k = be.alloc(DType::f32, {t, m.kv_heads * m.head_dim}), v = be.alloc(DType::f32, {t, m.kv_heads * m.head_dim});
    gate = be.alloc(DType::f32, {t, m.inter}), up = be.alloc(DType::f32, {t, m.inter});
  }
};

// Projections of one input as a block makes them: one matmul_many.
template <size_t N>
void project(Backend& be, const Tensor& x, std::array<const Tensor*, N> ws, std::array<Tensor*, N> ys) {
  const std::array<const Tensor*, N> no_bias{};
  be.matmul_many(x, ws, no_bias, ys);
}

// One layer on x [t, hidden] (in place), t tokens at positions[0..t).
// With `batch` > 1: that many sequences of rows / batch tokens each, over caches [batch, slots, ...].
void layer_forward(Backend& be, Layer& L, const std::vector<float>& inv_freq, Scratch& s, Tensor& x,
                   std::span<const int32_t> positions, int64_t batch = 1, Tensor* k_cache = nullptr,
                   Tensor* v_cache = nullptr) {
  const auto& m = model_shape;
  const int64_t rows = static_cast<int64_t>(positions.size()), t = rows / batch;
  ContiguousKv cache(k_cache ? *k_cache : L.k_cache, v_cache ? *v_cache : L.v_cache);
  const float scale = 1.f / std::sqrt(static_cast<float>(m.head_dim));
  be.rms_norm(x, L.ln1, 1e-5f, s.h);
  project<3>(be, s.h, {&L.wq, &L.wk, &L.wv}, {&s.q, &s.k, &s.v});
  Tensor q3 = s.q.reshaped({rows, m.heads, m.head_dim}), k3 = s.k.reshaped({rows, m.kv_heads, m.head_dim});
  be.rope_kv_write(q3, k3, s.v.reshaped({rows, m.kv_heads, m.head_dim}), positions, inv_freq, cache.pages());
  Tensor attn = s.attn.reshaped({batch, t, m.hidden});
  be.attention(s.q.reshaped({batch, t, m.heads, m.head_dim}), cache.pages(), positions, {.scale = scale}, attn);
  be.matmul_add(s.attn, L.wo, nullptr, x);
  be.rms_norm(x, L.ln2, 1e-5f, s.h);
  project<2>(be, s.h, {&L.wg, &L.wu}, {&s.gate, &s.up});
  be.silu_mul(s.gate, s.up, s.gate);
  be.matmul_add(s.gate, L.wd, nullptr, x);
}

// t tokens at positions[0..t) through every layer; s.x holds the hidden states in and out.
void forward(Backend& be, Model& model, Scratch& s, std::span<const int32_t> positions) {
  for (Layer& L : model.layers) layer_forward(be, L, model.inv_freq, s, s.x, positions);
}

// How a decode step reaches the device: each operation launched as called (as a server's block actors run it);
// one recording (CUDA graph) per layer replayed in turn, the hidden state copied in and out of each; one recording
// of the whole stack per step (as LocalModel runs it).
enum class Launch { each_operation, recording_per_layer, recording_per_step };

struct Result {
  double tokens_per_s, gbps;
};

// Decodes `tokens` tokens one at a time starting at `start`; the hidden state travels host -> device -> host.
Result decode(Backend& be, Model& model, int64_t start, int64_t tokens, Launch launch = Launch::each_operation) {
  Scratch s(be, 1);
  const Tensor input = filled({1, model_shape.hidden}, 0.5f);
  std::vector<std::unique_ptr<Recording>> recordings;
  const int32_t first[1] = {static_cast<int32_t>(start)};
  if (launch == Launch::recording_per_layer)
    for (Layer& L : model.layers)
      recordings.push_back(be.record(
          s.x, first, [&](Tensor& io, std::span<const int32_t> p) { layer_forward(be, L, model.inv_freq, s, io, p); }));
  if (launch == Launch::recording_per_step)
    recordings.push_back(be.record(s.x, first, [&](Tensor& io, std::span<const int32_t> p) {
      for (Layer& L : model.layers) layer_forward(be, L, model.inv_freq, s, io, p);
    }));
  for (const auto& r : recordings)
    if (!r) throw std::runtime_error("the backend did not record the decode step");
  auto step = [&](int32_t pos) {
    const Tensor x = be.upload(input);
    be.add(x, x, s.x);  // the received hidden state becomes this pass's input
    const int32_t p[1] = {pos};
    if (recordings.empty())
      forward(be, model, s, p);
    else
      for (auto& r : recordings) r->replay(s.x, p);
    be.download(s.x);
  };
  for (int32_t i = 0; i < 4; ++i) step(static_cast<int32_t>(start) + i);  // warm-up (same slots as measured)
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < tokens; ++i) step(static_cast<int32_t>(start + i));
  const double dt = seconds_since(t0);
  return {static_cast<double>(tokens) / dt, static_cast<double>(model.weight_bytes) * tokens / dt / 1e9};
}

// `batch` sessions decoding together, one token each per step (one recording per layer where the backend
// records the step, else launched op by op), `tokens` steps from context 0 over caches of 1024 slots: aggregate
// tokens/s. `recorded` tells which.
Result decode_batched(Backend& be, Model& model, int64_t batch, int64_t tokens, bool& recorded) {
  const auto& m = model_shape;
  const int64_t slots = 1024;
  Scratch s(be, batch);
  std::vector<Tensor> k_caches, v_caches;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    k_caches.push_back(be.alloc(DType::f32, {batch, slots, m.kv_heads, m.head_dim}));
    v_caches.push_back(be.alloc(DType::f32, {batch, slots, m.kv_heads, m.head_dim}));
  }
  const Tensor input = filled({batch, m.hidden}, 0.5f);
  std::vector<int32_t> positions(static_cast<size_t>(batch), 0);
  std::vector<std::unique_ptr<Recording>> recordings;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    recordings.push_back(be.record(s.x, positions, [&, l](Tensor& io, std::span<const int32_t> p) {
      layer_forward(be, model.layers[l], model.inv_freq, s, io, p, batch, &k_caches[l], &v_caches[l]);
    }));
    if (!recordings.back()) {
      recordings.clear();
      break;
    }
  }
  recorded = !recordings.empty();
  auto step = [&](int32_t pos) {
    const Tensor x = be.upload(input);
    be.add(x, x, s.x);
    std::fill(positions.begin(), positions.end(), pos);
    for (size_t l = 0; l < model.layers.size(); ++l) {
      if (recorded)
        recordings[l]->replay(s.x, positions);
      else
        layer_forward(be, model.layers[l], model.inv_freq, s, s.x, positions, batch, &k_caches[l], &v_caches[l]);
    }
    be.download(s.x);
  };
  for (int32_t i = 0; i < 4; ++i) step(i);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < tokens; ++i) step(static_cast<int32_t>(i));
  const double dt = seconds_since(t0);
  return {static_cast<double>(tokens * batch) / dt, static_cast<double>(model.weight_bytes) * tokens / dt / 1e9};
}

// Multiply-add FLOPs of the matrices of every layer for t tokens: 2 · t · (weight elements).
double matmul_flops(const Model& model, int64_t t) {
  double elements = 0;
  for (const Layer& L : model.layers)
    for (const Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd})
      elements += static_cast<double>(w->dim(0)) * static_cast<double>(w->dim(1));
  return 2.0 * static_cast<double>(t) * elements;
}

// cuBLAS alone at prefill's shapes: one bf16 GEMM per matrix of every layer ([t, k] bf16 activations, f32
// accumulation and output), TFLOP/s. The reference the prefill figure is compared with (the backend runs two
// such GEMMs per matrix, hi and lo parts of the activations, to keep them exact to about 16 bits).
double cublas_prefill_tflops(Model& model, int64_t t) {
  const auto& m = model_shape;
  const int64_t widest = std::max(m.hidden, m.inter);
  void *a = nullptr, *c = nullptr;
  cudaMalloc(&a, static_cast<size_t>(t * widest) * 2);
  cudaMalloc(&c, static_cast<size_t>(t * widest) * 4);
  cudaMemset(a, 0x3c, static_cast<size_t>(t * widest) * 2);  // bf16 0x3c3c, about 0.0115: not zeros
  cublasHandle_t blas = nullptr;
  cublasCreate(&blas);
  const float alpha = 1.f, beta = 0.f;
  auto pass = [&] {
    for (Layer& L : model.layers)
      for (Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd}) {
        const int n = static_cast<int>(w->dim(0)), k = static_cast<int>(w->dim(1)), it = static_cast<int>(t);
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, n, it, k, &alpha, w->data(), CUDA_R_16BF, k, a, CUDA_R_16BF, k,
                     &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      }
  };
  pass();
  cudaDeviceSynchronize();
  const auto t0 = std::chrono::steady_clock::now();
  const int rounds = 3;
  for (int r = 0; r < rounds; ++r) pass();
  cudaDeviceSynchronize();
  const double dt = seconds_since(t0) / rounds;
  cublasDestroy(blas);
  cudaFree(a);
  cudaFree(c);
  return matmul_flops(model, t) / dt / 1e12;
}

// Device memory bandwidth as a device-to-device copy of 2 GiB measures it (bytes read + bytes written per
// second): the ceiling the decode figures are compared with, from the same run.
double copy_gbps() {
  const size_t bytes = size_t{1} << 31;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    cudaGetLastError();
    return 0;
  }
  cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  const int rounds = 10;
  cudaEventRecord(e0);
  for (int i = 0; i < rounds; ++i) cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return ms > 0 ? 2.0 * static_cast<double>(bytes) * rounds / (ms * 1e-3) / 1e9 : 0;
}

// The gate projection (5632 x 2048 bf16) of every layer in turn, one row of activations: the kernel alone.
double matvec_gbps(Backend& be, Model& model, int rounds) {
  Tensor x = be.upload(filled({1, model_shape.hidden}, 0.5f));
  Tensor y = be.alloc(DType::f32, {1, model_shape.inter});
  for (Layer& L : model.layers) be.matmul(x, L.wg, nullptr, y);
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r)
    for (Layer& L : model.layers) be.matmul(x, L.wg, nullptr, y);
  be.synchronize();
  const double dt = seconds_since(t0);
  return static_cast<double>(model.layers[0].wg.nbytes()) * model.layers.size() * rounds / dt / 1e9;
}

double prefill_tokens_per_s(Backend& be, Model& model, int64_t t) {
  Scratch s(be, t);
  std::vector<int32_t> positions(static_cast<size_t>(t));
  std::iota(positions.begin(), positions.end(), 0);
  be.add(be.upload(filled({t, model_shape.hidden}, 0.5f)), be.upload(filled({t, model_shape.hidden}, 0.f)), s.x);
  forward(be, model, s, positions);  // warm-up
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  forward(be, model, s, positions);
  be.download(s.x);
  return static_cast<double>(t) / seconds_since(t0);
}

// "12.3%" of the peak, or "n/a" when the driver does not report the memory clock.
std::string of_peak(double gbps, double peak_gbps) {
  if (peak_gbps <= 0) return "  n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%5.1f%%", 100.0 * gbps / peak_gbps);
  return buf;
}

int run(int64_t tokens) {
  int dev = 0, clock_khz = 0;
  cudaGetDevice(&dev);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev);  // no longer a cudaDeviceProp field
  const double peak_gbps = 2.0 * clock_khz * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9;  // double data rate

  const auto t_build = std::chrono::steady_clock::now();
  std::unique_ptr<Backend> custom = make_backend("cuda");
  Model model = build(*custom);
  std::printf("bench_cuda_decode: %s, %d SMs, %.0f GiB, peak memory bandwidth %.0f GB/s (%d-bit bus, %d MHz)\n",
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, peak_gbps, prop.memoryBusWidth,
              clock_khz / 1000);
  std::printf("model: %s shape, %lld layers, bf16 weights %.2f GB read per token (built in %.1f s)\n", model_shape.name,
              static_cast<long long>(model_shape.layers), model.weight_bytes / 1e9, seconds_since(t_build));
  if (peak_gbps > 0)
    std::printf("bandwidth bound: %.0f tokens/s (peak bandwidth / weight bytes per token)\n",
                peak_gbps * 1e9 / static_cast<double>(model.weight_bytes));

  const double copy = copy_gbps();
  std::printf(
      "device-to-device copy: %.0f GB/s (read + written) = %s of peak; decode bound at that rate: %.0f "
      "tokens/s\n",
      copy, of_peak(copy, peak_gbps).c_str(), copy * 1e9 / static_cast<double>(model.weight_bytes));
  auto of_copy = [&](double gbps) { return of_peak(gbps, copy); };
  auto line = [&](const char* what, Result r) {
    std::printf("  %-50s %8.1f tokens/s  %7.3f ms/token  %7.0f GB/s  %s of peak  %s of copy\n", what, r.tokens_per_s,
                1e3 / r.tokens_per_s, r.gbps, of_peak(r.gbps, peak_gbps).c_str(), of_copy(r.gbps).c_str());
  };
  auto kernel_line = [&](const char* what, double gbps) {
    std::printf("  %-50s %35s %7.0f GB/s  %s of peak  %s of copy\n", what, "", gbps, of_peak(gbps, peak_gbps).c_str(),
                of_copy(gbps).c_str());
  };
  const Result dec = decode(*custom, model, 0, tokens);
  line("decode, each operation launched, context 0..", dec);
  const Result dec_layer = decode(*custom, model, 0, tokens, Launch::recording_per_layer);
  line("decode, a CUDA graph per layer, context 0..", dec_layer);
  const Result dec_step = decode(*custom, model, 0, tokens, Launch::recording_per_step);
  line("decode, one CUDA graph per token, context 0..", dec_step);
  const Result dec_long = decode(*custom, model, 3000, tokens / 2);
  line("decode, each operation launched, context 3000..", dec_long);
  const Result dec_long_layer = decode(*custom, model, 3000, tokens / 2, Launch::recording_per_layer);
  line("decode, a CUDA graph per layer, context 3000..", dec_long_layer);
  kernel_line("custom matvec alone (bf16 5632x2048, x22)", matvec_gbps(*custom, model, 20));
  custom->synchronize();
  double batch1 = 0;
  for (int64_t batch : {1, 8, 32, 64}) {
    bool recorded = false;
    const Result r = decode_batched(*custom, model, batch, std::min<int64_t>(tokens, 64), recorded);
    if (batch == 1) batch1 = r.tokens_per_s;
    std::printf("  decode, %2lld sessions together (%s)%*s %8.1f tokens/s  %5.2fx batch 1\n",
                static_cast<long long>(batch), recorded ? "graph per layer" : "op by op", recorded ? 7 : 14, "",
                r.tokens_per_s, r.tokens_per_s / batch1);
  }

  // The same weights through cuBLAS (activations rounded to bf16).
  setenv("COROLLA_CUDA_MATVEC", "cublas", 1);
  std::unique_ptr<Backend> cublas = make_backend("cuda");
  unsetenv("COROLLA_CUDA_MATVEC");
  const Result dec_blas = decode(*cublas, model, 0, tokens);
  line("decode, cuBLAS for the matmuls, context 0..", dec_blas);
  kernel_line("cuBLAS alone (bf16 5632x2048, x22)", matvec_gbps(*cublas, model, 20));
  cublas->synchronize();

  // Other weight formats and shapes, op by op (a server) and one graph per token (LocalModel), each against the
  // copy's bound for its own bytes per token.
  auto other = [&](const char* label, ModelShape shape, DType dtype, int64_t n) {
    model_shape = shape;
    const auto t0 = std::chrono::steady_clock::now();
    Model m = build(*custom, dtype);
    std::printf(
        "  %s shape, %s weights: %.2f GB read per token, bound %.0f tokens/s at the copy's rate (built in "
        "%.0f s)\n",
        shape.name, std::string(dtype_name(dtype)).c_str(), m.weight_bytes / 1e9,
        copy * 1e9 / static_cast<double>(m.weight_bytes), seconds_since(t0));
    line("  decode, each operation launched", decode(*custom, m, 0, n));
    line("  decode, one CUDA graph per token", decode(*custom, m, 0, n, Launch::recording_per_step));
    custom->synchronize();
  };
  {
    Model released = std::move(model);  // room for the others
  }
  other("TinyLlama-1.1B", kTinyLlama, DType::q8_0, tokens);
  other("TinyLlama-1.1B", kTinyLlama, DType::q4_0, tokens);
  other("Llama-3-8B", kLlama3_8B, DType::bf16, tokens / 2);
  model_shape = kTinyLlama;
  model = build(*custom);

  const double pre = prefill_tokens_per_s(*custom, model, 512);
  for (int64_t t : {int64_t{512}, int64_t{4096}}) {
    const double tps = t == 512 ? pre : prefill_tokens_per_s(*custom, model, t);
    const double ours = matmul_flops(model, t) / (static_cast<double>(t) / tps) / 1e12;
    const double ref = cublas_prefill_tflops(model, t);
    std::printf(
        "  prefill, %4lld tokens in one pass: %8.0f tokens/s, matrices at %6.1f TFLOP/s; one bf16 cuBLAS "
        "GEMM per matrix alone %6.1f TFLOP/s: ratio %.2f\n",
        static_cast<long long>(t), tps, ours, ref, ours / ref);
  }

  std::printf(
      "summary: decode %.1f tokens/s launched op by op (a server's blocks) = %s of the %.0f GB/s copy, %.1f "
      "with a CUDA graph per layer (%.2fx), %.1f with one per token (LocalModel, %.2fx) = %s of the copy; "
      "custom/cuBLAS decode speed ratio %.2f; prefill %.0f tokens/s\n",
      dec.tokens_per_s, of_copy(dec.gbps).c_str(), copy, dec_layer.tokens_per_s,
      dec_layer.tokens_per_s / dec.tokens_per_s, dec_step.tokens_per_s, dec_step.tokens_per_s / dec.tokens_per_s,
      of_copy(dec_step.gbps).c_str(), dec.tokens_per_s / dec_blas.tokens_per_s, pre);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = std::clamp<int64_t>(argc > 1 ? std::atoll(argv[1]) : 128, 2, 1000);  // within the cache
  if (!cuda_available()) {
    std::printf("bench_cuda_decode: no CUDA GPU found, nothing measured\n");
    return 77;
  }
  try {
    return run(tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_decode: %s\n", e.what());
    return 1;
  }
}
