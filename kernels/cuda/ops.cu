// Elementwise and row-wise kernels: norms, rotary embedding, SwiGLU and GeGLU, residual add, softmax, KV-cache writes,
// embedding lookup. Each mirrors the CPU backend's arithmetic (same formulas, f32 throughout).
#include <atomic>

#include "kernels/cuda/common.cuh"
#include "kernels/gelu.hpp"

namespace corolla::gpu {
namespace {

constexpr int kRowThreads = 256;
constexpr int kElemThreads = 256;
// Norms and the rotary/KV-write kernel: a decode step has one row, so its latency is one block's: more threads,
// fewer dependent loads each (256 threads measured slower on an H200: docs/PERFORMANCE.md, "CUDA backend").
constexpr int kWideRowThreads = 1024;

// One block per row; y may be x.
__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float eps, float* y, int64_t d) {
  wait_for_prior_grid();
  allow_next_grid();
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float ss = 0.f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  ss = block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

__global__ void layer_norm_kernel(const float* x, const float* __restrict__ w, const float* __restrict__ b, float eps,
                                  float* y, int64_t d) {
  wait_for_prior_grid();
  allow_next_grid();
  __shared__ float scratch[kWarp];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s, scratch) / static_cast<float>(d);
  float v = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) v = fmaf(xr[i] - mean, xr[i] - mean, v);
  const float var = block_sum(v, scratch) / static_cast<float>(d);
  const float inv = 1.f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

// One block per token; cos/sin of the token's angles (times `scale`) in shared memory (2·half floats), then every
// head rotates its first 2·half values (half = head_dim / 2, or fewer with Phi-3's partial rotary); the rest pass.
__global__ void rope_kernel(float* x, int64_t heads, int64_t head_dim, int64_t half, float scale,
                            const int32_t* __restrict__ positions, const float* __restrict__ inv_freq) {
  extern __shared__ float cs[];
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = pos * inv_freq[i];  // f32 product, as Hugging Face computes it
    cs[i] = cosf(angle) * scale;
    cs[half + i] = sinf(angle) * scale;
  }
  __syncthreads();
  float* xt = x + t * heads * head_dim;
  for (int64_t p = threadIdx.x; p < heads * half; p += blockDim.x) {
    const int64_t h = p / half, i = p % half;
    float* v = xt + h * head_dim;
    const float a = v[i], b = v[i + half], c = cs[i], s = cs[half + i];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// out may alias gate or up.
// out may be x.
__global__ void gelu_kernel(const float* x, Gelu form, float* out, int64_t n) {
  wait_for_prior_grid();
  allow_next_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = gelu_value(x[i], form);
}

// The gate's activations of the gated MLPs: SwiGLU's silu and GeGLU's gelu.
struct Silu {
  __device__ float operator()(float g) const { return g / (1.f + expf(-g)); }
};
struct GeluOf {
  Gelu form;
  __device__ float operator()(float g) const { return gelu_value(g, form); }
};

// o = act(g) · u; o may alias g or u.
template <class Act>
__global__ void gated_mul_kernel(const float* g, const float* u, float* o, int64_t n, Act act) {
  wait_for_prior_grid();
  allow_next_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    o[i] = act(g[i]) * u[i];
}

// out may alias a or b.
__global__ void add_kernel(const float* a, const float* b, float* o, int64_t n) {
  wait_for_prior_grid();
  allow_next_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    o[i] = a[i] + b[i];
}

__global__ void softmax_kernel(float* x, int64_t d) {
  __shared__ float scratch[kWarp];
  float* xr = x + blockIdx.x * d;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) mx = fmaxf(mx, xr[i]);
  mx = block_max(mx, scratch);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float e = expf(xr[i] - mx);
    xr[i] = e;
    s += e;
  }
  const float inv = 1.f / block_sum(s, scratch);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) xr[i] *= inv;
}

// One block per token of k / v.
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                const int32_t* __restrict__ positions, DevicePages cache, int64_t tokens, int64_t row) {
  const int64_t i = blockIdx.x, b = i / tokens;
  const int64_t dst = cache.row(b, positions[i]) * row, src = i * row;
  for (int64_t j = threadIdx.x; j < row; j += blockDim.x) {
    cache.k[dst + j] = k[src + j];
    cache.v[dst + j] = v[src + j];
  }
}

// One block per token: q's and k's heads rotated in place (as rope_kernel, scale 1), then k and v stored at the
// token's slot (k's values past the rotated part, with partial rotary, as they are).
__global__ void rope_kv_write_kernel(float* q, float* k, const float* __restrict__ v, int64_t hq, int64_t hkv,
                                     int64_t head_dim, int64_t half, const int32_t* __restrict__ positions,
                                     const float* __restrict__ inv_freq, DevicePages cache, int64_t tokens) {
  wait_for_prior_grid();
  allow_next_grid();
  extern __shared__ float cs[];
  const int64_t t = blockIdx.x, row = hkv * head_dim, passed = head_dim - 2 * half;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = pos * inv_freq[i];
    cs[i] = cosf(angle);
    cs[half + i] = sinf(angle);
  }
  __syncthreads();
  float* qt = q + t * hq * head_dim;
  float* kt = k + t * row;
  const int64_t dst = cache.row(t / tokens, positions[t]) * row;
  float* k_cache = cache.k;
  float* v_cache = cache.v;
  for (int64_t p = threadIdx.x; p < (hq + hkv) * half; p += blockDim.x) {
    const int64_t h = p / half, i = p % half;
    float* x = h < hq ? qt + h * head_dim : kt + (h - hq) * head_dim;
    const float a = x[i], b = x[i + half], c = cs[i], s = cs[half + i];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
    if (h >= hq) {
      k_cache[dst + (h - hq) * head_dim + i] = x[i];
      k_cache[dst + (h - hq) * head_dim + i + half] = x[i + half];
    }
  }
  for (int64_t p = threadIdx.x; p < hkv * passed; p += blockDim.x) {
    const int64_t j = p / passed * head_dim + 2 * half + p % passed;
    k_cache[dst + j] = kt[j];
  }
  const float* vt = v + t * row;
  for (int64_t j = threadIdx.x; j < row; j += blockDim.x) v_cache[dst + j] = vt[j];
}

template <DType T>
__global__ void embed_kernel(const char* __restrict__ table, int64_t row_bytes, const int32_t* __restrict__ ids,
                             int64_t d, float scale, float* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const char* row = table + static_cast<int64_t>(ids[i]) * row_bytes;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[i * d + j] = load_elem<T>(row, j) * scale;
}

__global__ void gather_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows, int64_t d,
                                   float* __restrict__ out) {
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * d;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dst[j] = src[j];
}

// One block per row of x; the rows are distinct, so no two blocks write the same output row.
__global__ void scatter_add_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ rows,
                                        const float* __restrict__ scale, int64_t d, float* __restrict__ out) {
  const float a = scale[blockIdx.x];
  const float* src = x + static_cast<int64_t>(blockIdx.x) * d;
  float* dst = out + static_cast<int64_t>(rows[blockIdx.x]) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dst[j] = fmaf(a, src[j], dst[j]);
}

unsigned grid_rows(int64_t rows) { return static_cast<unsigned>(rows); }

std::atomic<bool> programmatic{false};

}  // namespace

void programmatic_launch(bool on) { programmatic.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return programmatic.load(std::memory_order_relaxed); }

void rms_norm(const float* x, const float* w, float eps, float* y, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows == 0 || d == 0) return;
  launch_after(rms_norm_kernel, grid_rows(rows), kWideRowThreads, 0, stream, x, w, eps, y, d);
  check_launch("rms_norm");
}

void layer_norm(const float* x, const float* w, const float* b, float eps, float* y, int64_t rows, int64_t d,
                cudaStream_t stream) {
  if (rows == 0 || d == 0) return;
  launch_after(layer_norm_kernel, grid_rows(rows), kWideRowThreads, 0, stream, x, w, b, eps, y, d);
  check_launch("layer_norm");
}

void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t half, float scale,
          const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  if (tokens == 0 || heads == 0 || half < 1) return;
  const size_t smem = static_cast<size_t>(half) * 2 * sizeof(float);
  rope_kernel<<<grid_rows(tokens), kRowThreads, smem, stream>>>(x, heads, head_dim, half, scale, positions, inv_freq);
  check_launch("rope");
}

void gelu(const float* x, Gelu form, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_after(gelu_kernel, blocks_for(n, kElemThreads), kElemThreads, 0, stream, x, form, out, n);
  check_launch("gelu");
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_after(gated_mul_kernel<Silu>, blocks_for(n, kElemThreads), kElemThreads, 0, stream, gate, up, out, n, Silu{});
  check_launch("silu_mul");
}

void gelu_mul(const float* gate, const float* up, Gelu form, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_after(gated_mul_kernel<GeluOf>, blocks_for(n, kElemThreads), kElemThreads, 0, stream, gate, up, out, n,
               GeluOf{form});
  check_launch("gelu_mul");
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_after(add_kernel, blocks_for(n, kElemThreads), kElemThreads, 0, stream, a, b, out, n);
  check_launch("add");
}

void softmax(float* x, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows == 0 || d == 0) return;
  softmax_kernel<<<grid_rows(rows), kRowThreads, 0, stream>>>(x, d);
  check_launch("softmax");
}

void kv_write(const float* k, const float* v, const int32_t* positions, const DevicePages& cache, int64_t batch,
              int64_t tokens, int64_t row, cudaStream_t stream) {
  if (batch * tokens == 0 || row == 0) return;
  kv_write_kernel<<<grid_rows(batch * tokens), kRowThreads, 0, stream>>>(k, v, positions, cache, tokens, row);
  check_launch("kv_write");
}

void rope_kv_write(float* q, float* k, const float* v, int64_t batch, int64_t tokens, int64_t hq, int64_t hkv,
                   int64_t head_dim, int64_t half, const int32_t* positions, const float* inv_freq,
                   const DevicePages& cache, cudaStream_t stream) {
  if (batch * tokens == 0 || head_dim == 0) return;
  const size_t smem = static_cast<size_t>(2 * half) * sizeof(float);
  launch_after(rope_kv_write_kernel, grid_rows(batch * tokens), kWideRowThreads, smem, stream, q, k, v, hq, hkv,
               head_dim, half, positions, inv_freq, cache, tokens);
  check_launch("rope_kv_write");
}

void gather_rows(const float* x, const int32_t* rows, int64_t r, int64_t d, float* out, cudaStream_t stream) {
  if (r == 0 || d == 0) return;
  gather_rows_kernel<<<grid_rows(r), kRowThreads, 0, stream>>>(x, rows, d, out);
  check_launch("gather_rows");
}

void scatter_add_rows(const float* x, const int32_t* rows, const float* scale, int64_t r, int64_t d, float* out,
                      cudaStream_t stream) {
  if (r == 0 || d == 0) return;
  scatter_add_rows_kernel<<<grid_rows(r), kRowThreads, 0, stream>>>(x, rows, scale, d, out);
  check_launch("scatter_add_rows");
}

void embed(DType t, const void* table, const int32_t* ids, int64_t n, int64_t d, float scale, float* out,
           cudaStream_t stream) {
  if (n == 0 || d == 0) return;
  const int64_t row_bytes = storage_bytes(t, d);
  dispatch_weight(t, [&]<DType T>() {
    embed_kernel<T>
        <<<grid_rows(n), kRowThreads, 0, stream>>>(static_cast<const char*>(table), row_bytes, ids, d, scale, out);
  });
  check_launch("embed");
}

}  // namespace corolla::gpu
