// Decode microbenchmark of the CUDA backend: a TinyLlama-1.1B-shaped stack of 22 Llama blocks (hidden 2048, 32
// query heads / 4 KV heads of 64, intermediate 5632, random bf16 weights) built directly from backend operations.
// Per token and layer: rms_norm, q/k/v matmuls (one matmul_many), rope, kv_write, attention, o matmul, residual add,
// rms_norm, gate/up matmuls (one matmul_many), silu_mul, down matmul added to the residual; the hidden state is uploaded before and downloaded after
// each token, as a server does.
//
// Prints tokens/s and the weight bytes read per second against the GPU's peak memory bandwidth
// (cudaDevAttrMemoryClockRate × bus width × 2) and against a device-to-device copy measured in the same run, for:
// decode with each operation launched as called, with a CUDA graph per layer (Backend::record, as a server's
// block actors replay them) and with one graph per token; decode with cuBLAS (COROLLA_CUDA_MATVEC=cublas), decode
// at a long context, the matrix-vector kernel alone, and a prefill.
//   bench_cuda_decode [tokens=128]
// Exits with 77 when no CUDA GPU is present.
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
  int64_t hidden = 2048, layers = 22, heads = 32, kv_heads = 4, head_dim = 64, inter = 5632, slots = 4096;
};
constexpr ModelShape kModel{};

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

Model build(Backend& be) {
  const auto& m = kModel;
  const int64_t kv = m.kv_heads * m.head_dim;
  // One host tensor per projection kind; every layer gets its own device copy.
  const Tensor q = random_bf16(m.hidden, m.hidden, 1), k = random_bf16(kv, m.hidden, 2),
               v = random_bf16(kv, m.hidden, 3), o = random_bf16(m.hidden, m.hidden, 4),
               g = random_bf16(m.inter, m.hidden, 5), u = random_bf16(m.inter, m.hidden, 6),
               d = random_bf16(m.hidden, m.inter, 7);
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
    const auto& m = kModel;
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
void layer_forward(Backend& be, Layer& L, const std::vector<float>& inv_freq, Scratch& s, Tensor& x,
                   std::span<const int32_t> positions) {
  const auto& m = kModel;
  const int64_t t = static_cast<int64_t>(positions.size());
  const float scale = 1.f / std::sqrt(static_cast<float>(m.head_dim));
  be.rms_norm(x, L.ln1, 1e-5f, s.h);
  project<3>(be, s.h, {&L.wq, &L.wk, &L.wv}, {&s.q, &s.k, &s.v});
  Tensor q3 = s.q.reshaped({t, m.heads, m.head_dim}), k3 = s.k.reshaped({t, m.kv_heads, m.head_dim});
  be.rope(q3, positions, inv_freq);
  be.rope(k3, positions, inv_freq);
  be.kv_write(s.k.reshaped({1, t, m.kv_heads, m.head_dim}), s.v.reshaped({1, t, m.kv_heads, m.head_dim}), positions,
              L.k_cache, L.v_cache);
  Tensor attn = s.attn.reshaped({1, t, m.hidden});
  be.attention(s.q.reshaped({1, t, m.heads, m.head_dim}), L.k_cache, L.v_cache, positions, {.scale = scale}, attn);
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

// How a decode step reaches the device: each operation launched as called; one recording (CUDA graph) per layer
// replayed in turn, the hidden state copied in and out of each, as a server's block actors run; one recording of
// the whole stack per step.
enum class Launch { each_operation, recording_per_layer, recording_per_step };

struct Result {
  double tokens_per_s, gbps;
};

// Decodes `tokens` tokens one at a time starting at `start`; the hidden state travels host -> device -> host.
Result decode(Backend& be, Model& model, int64_t start, int64_t tokens, Launch launch = Launch::each_operation) {
  Scratch s(be, 1);
  const Tensor input = filled({1, kModel.hidden}, 0.5f);
  std::vector<std::unique_ptr<Recording>> recordings;
  const int32_t first[1] = {static_cast<int32_t>(start)};
  if (launch == Launch::recording_per_layer)
    for (Layer& L : model.layers)
      recordings.push_back(be.record(s.x, first, [&](Tensor& io, std::span<const int32_t> p) {
        layer_forward(be, L, model.inv_freq, s, io, p);
      }));
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
  Tensor x = be.upload(filled({1, kModel.hidden}, 0.5f));
  Tensor y = be.alloc(DType::f32, {1, kModel.inter});
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
  be.add(be.upload(filled({t, kModel.hidden}, 0.5f)), be.upload(filled({t, kModel.hidden}, 0.f)), s.x);
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
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, peak_gbps,
              prop.memoryBusWidth, clock_khz / 1000);
  std::printf("model: TinyLlama-1.1B shape, %lld layers, bf16 weights %.2f GB read per token (built in %.1f s)\n",
              static_cast<long long>(kModel.layers), model.weight_bytes / 1e9, seconds_since(t_build));
  if (peak_gbps > 0)
    std::printf("bandwidth bound: %.0f tokens/s (peak bandwidth / weight bytes per token)\n",
                peak_gbps * 1e9 / static_cast<double>(model.weight_bytes));

  const double copy = copy_gbps();
  std::printf("device-to-device copy: %.0f GB/s (read + written) = %s of peak; decode bound at that rate: %.0f "
              "tokens/s\n",
              copy, of_peak(copy, peak_gbps).c_str(), copy * 1e9 / static_cast<double>(model.weight_bytes));
  auto of_copy = [&](double gbps) { return of_peak(gbps, copy); };
  auto line = [&](const char* what, Result r) {
    std::printf("  %-50s %8.1f tokens/s  %7.3f ms/token  %7.0f GB/s  %s of peak  %s of copy\n", what,
                r.tokens_per_s, 1e3 / r.tokens_per_s, r.gbps, of_peak(r.gbps, peak_gbps).c_str(),
                of_copy(r.gbps).c_str());
  };
  auto kernel_line = [&](const char* what, double gbps) {
    std::printf("  %-50s %35s %7.0f GB/s  %s of peak  %s of copy\n", what, "", gbps,
                of_peak(gbps, peak_gbps).c_str(), of_copy(gbps).c_str());
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

  // The same weights through cuBLAS (activations rounded to bf16).
  setenv("COROLLA_CUDA_MATVEC", "cublas", 1);
  std::unique_ptr<Backend> cublas = make_backend("cuda");
  unsetenv("COROLLA_CUDA_MATVEC");
  const Result dec_blas = decode(*cublas, model, 0, tokens);
  line("decode, cuBLAS for the matmuls, context 0..", dec_blas);
  kernel_line("cuBLAS alone (bf16 5632x2048, x22)", matvec_gbps(*cublas, model, 20));
  cublas->synchronize();

  const double pre = prefill_tokens_per_s(*custom, model, 512);
  std::printf("  %-44s %8.0f tokens/s\n", "prefill, 512 tokens in one pass (cuBLAS)", pre);

  std::printf("summary: decode %.1f tokens/s launched op by op, %.1f with a CUDA graph per layer (%.2fx), %.1f with one "
              "per token (%.2fx); per layer: weights read at %.0f GB/s = %s of %.0f GB/s peak, %s of the %.0f GB/s "
              "copy; custom/cuBLAS decode speed ratio %.2f; prefill %.0f tokens/s\n",
              dec.tokens_per_s, dec_layer.tokens_per_s, dec_layer.tokens_per_s / dec.tokens_per_s,
              dec_step.tokens_per_s, dec_step.tokens_per_s / dec.tokens_per_s, dec_layer.gbps,
              of_peak(dec_layer.gbps, peak_gbps).c_str(), peak_gbps, of_copy(dec_layer.gbps).c_str(), copy,
              dec.tokens_per_s / dec_blas.tokens_per_s, pre);
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
