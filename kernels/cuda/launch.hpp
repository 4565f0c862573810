// Host-side launchers of the CUDA kernels in kernels/cuda/*.cu, used by cuda_backend.cu.
//
// Every launcher queues its kernel on `stream` and throws std::runtime_error if the launch fails. Pointers are
// device pointers; shapes have been validated by the caller. All tensors are row-major and contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "kernels/backend.hpp"
#include "kernels/dtype.hpp"

namespace corolla::gpu {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* what);
inline void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) throw_cuda_error(error, what);
}

// Programmatic dependent launch of the decode kernels (common.cuh), process-wide: on only where every GPU in use is
// sm_90 or later.
void programmatic_launch(bool on);
bool programmatic_launch();

// A KvPages with its table on the device: position s of sequence b is pool row table[b·pages_per_sequence +
// (s / page_tokens) mod pages_per_sequence] · page_tokens + s % page_tokens of the pools k, v [P·page_tokens,
// Hkv·Dh] (the modulo is a ring's wrap; below the slots it changes nothing). 32-bit division: positions and pages
// are int32.
struct DevicePages {
  float* k = nullptr;
  float* v = nullptr;
  const int32_t* table = nullptr;
  uint32_t page_tokens = 1, pages_per_sequence = 1;
  COROLLA_HOST_DEVICE int64_t row(int64_t b, int64_t s) const {
    const uint32_t at = static_cast<uint32_t>(s), page = at / page_tokens;
    return static_cast<int64_t>(table[b * pages_per_sequence + page % pages_per_sequence]) * page_tokens +
           at % page_tokens;
  }
};

// --- matmul.cu -------------------------------------------------------------------------------------------------
// Up to this many rows of x, matmul streams the weights once through the matrix-vector kernel.
inline constexpr int64_t kMatvecMaxRows = 4;

// Several matrices of one dtype and width k applied to the same x, as one launch (up to kMaxMatvecJobs at a time):
// decode's q/k/v or gate/up projections, whose small matrices alone would leave most SMs idle.
inline constexpr int kMaxMatvecJobs = 4;
struct MatvecOutput {
  const void* w;  // [n, k]
  float* y;       // [m, n]
  int64_t n;
  const float* bias = nullptr;  // [n], added to each row
  bool accumulate = false;      // y += x · wᵀ (+ bias) instead of y =
};
void matvec_many(DType wt, std::span<const MatvecOutput> outputs, const float* x, int64_t m, int64_t k, int sm_count,
                 cudaStream_t stream);
// out[rows·k] (f32) = the first rows·k elements of w (any weight dtype), exactly.
void dequantize_to_f32(DType wt, const void* w, int64_t rows, int64_t k, float* out, cudaStream_t stream);
// x[n] = hi[n] + lo[n] in f16 or bf16 (`to`): hi = x rounded to nearest even, lo = the rounding error rounded.
// Two 16-bit GEMMs over hi and lo carry about twice the 16-bit type's precision (f16 saturates at ±65504).
void split_activations(const float* x, int64_t n, DType to, void* hi, void* lo, cudaStream_t stream);
// y[i, j] += bias[j] for y[m, n].
void add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream);

// --- ops.cu ----------------------------------------------------------------------------------------------------
void rms_norm(const float* x, const float* w, float eps, float* y, int64_t rows, int64_t d, cudaStream_t stream);
void layer_norm(const float* x, const float* w, const float* b, float eps, float* y, int64_t rows, int64_t d,
                cudaStream_t stream);
// x[tokens, heads, head_dim] in place; positions[tokens], inv_freq[half]: the first 2·half values of each head
// rotate (half <= head_dim / 2), cos and sin times `scale`.
void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t half, float scale,
          const int32_t* positions, const float* inv_freq, cudaStream_t stream);
void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// out = gelu(gate) · up (out may alias gate or up).
void gelu_mul(const float* gate, const float* up, Gelu form, float* out, int64_t n, cudaStream_t stream);
// out may be x.
void gelu(const float* x, Gelu form, float* out, int64_t n, cudaStream_t stream);
void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void softmax(float* x, int64_t rows, int64_t d, cudaStream_t stream);
// k, v [batch·tokens, row] go to the cache's rows of slots positions[b·tokens + t].
void kv_write(const float* k, const float* v, const int32_t* positions, const DevicePages& cache, int64_t batch,
              int64_t tokens, int64_t row, cudaStream_t stream);
// q [batch·tokens, hq, head_dim] and k [batch·tokens, hkv, head_dim] rotated in place as rope() does, then k and
// v stored as kv_write() does: one kernel for a decode step's three position-dependent operations.
void rope_kv_write(float* q, float* k, const float* v, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv,
                   int64_t head_dim, int64_t half, const int32_t* positions, const float* inv_freq,
                   const DevicePages& cache, cudaStream_t stream);
// out[i, :] = x[rows[i], :], i < r.
void gather_rows(const float* x, const int32_t* rows, int64_t r, int64_t d, float* out, cudaStream_t stream);
// out[rows[i], :] += scale[i] · x[i, :], i < r, rows distinct.
void scatter_add_rows(const float* x, const int32_t* rows, const float* scale, int64_t r, int64_t d, float* out,
                      cudaStream_t stream);
// out[i, :] = table[ids[i], :] as f32; table [*, d] of any weight dtype.
void embed(DType t, const void* table, const int32_t* ids, int64_t n, int64_t d, float scale, float* out,
           cudaStream_t stream);

// --- attention.cu ----------------------------------------------------------------------------------------------
inline constexpr int64_t kAttentionMaxHeadDim = 256;
inline constexpr int64_t kMaxAttentionSplits = 32, kMinSlotsPerSplit = 64;
// How many blocks are launched for the slots of one (token, query head), for `pairs` = batch · tokens · hq pairs over
// a cache of `slots` (within `window` when > 0): enough blocks to fill the GPU twice, each part at least
// kMinSlotsPerSplit slots of a full cache. Shapes only: a recording replays it at any position; each query uses
// as many of its blocks as its history fills kMinSlotsPerSplit slots each.
int attention_splits(int64_t pairs, int64_t slots, int64_t window, int sm_count);
// q [batch, tokens, hq, head_dim]; the cache's pages; out [batch, tokens, hq·head_dim]. A query at
// slot p sees slots spec.first_slot(p) .. p; scores are spec.capped(spec.scale · q·k), plus, with alibi_heads = hq,
// spec.alibi_slope(h) · s for slot s. With splits > 1, `partials` holds batch·tokens·hq·splits·(head_dim + 2)
// floats of scratch and `counters` batch·tokens·hq ints that are 0 (and are left so).
void attention(const float* q, const DevicePages& cache, const int32_t* positions, const AttentionSpec& spec,
               float* out, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv, int64_t head_dim, int splits,
               float* partials, int* counters, cudaStream_t stream);

// --- backward.cu -----------------------------------------------------------------------------------------------
void rms_norm_backward(const float* x, const float* w, float eps, const float* dy, float* dx, int64_t rows, int64_t d,
                       cudaStream_t stream);
void layer_norm_backward(const float* x, const float* w, float eps, const float* dy, float* dx, int64_t rows, int64_t d,
                         cudaStream_t stream);
// dx may alias d_out.
void gelu_backward(const float* x, Gelu form, const float* d_out, float* dx, int64_t n, cudaStream_t stream);
// d_gate may alias d_out.
void silu_mul_backward(const float* gate, const float* up, const float* d_out, float* d_gate, float* d_up, int64_t n,
                       cudaStream_t stream);
void gelu_mul_backward(const float* gate, const float* up, Gelu form, const float* d_out, float* d_gate, float* d_up,
                       int64_t n, cudaStream_t stream);
// q, d_out, dq [batch, tokens, hq, head_dim]; k, v, dk, dv [batch, tokens, hkv, head_dim]; lse, delta: scratch of
// batch·tokens·hq floats each. Causal within each sequence (and within the window when window > 0), with ALiBi
// and the soft cap as attention().
void attention_backward(const float* q, const float* k, const float* v, const float* d_out, const AttentionSpec& spec,
                        float* dq, float* dk, float* dv, float* lse, float* delta, int64_t batch, int64_t tokens,
                        int64_t hq, int64_t hkv, int64_t head_dim, cudaStream_t stream);

}  // namespace corolla::gpu
