// Matrix multiplication kernels: the matrix-vector product for decode (weights read once, as stored) and the
// helpers of the cuBLAS path for prefill (weight dequantization and activation splits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

namespace corolla::gpu {
namespace {

constexpr int kMatvecWarps = 8;
constexpr int kMatvecThreads = kMatvecWarps * kWarp;

// The matrices of one launch (the projections of one input): the grid's blocks are dealt out to them in order.
struct MatvecJobs {
  struct Job {
    const char* w;
    float* y;
    const float* bias;
    int64_t n;
    unsigned first_block;
    bool accumulate;
  } job[kMaxMatvecJobs];
  int count;
};

// This block's matrix and its block index within that matrix.
struct JobBlock {
  const char* w;
  float* y;
  const float* bias;
  int64_t n;
  unsigned block;
  bool accumulate;
  __device__ explicit JobBlock(const MatvecJobs& jobs) {
    int j = 0;
    while (j + 1 < jobs.count && blockIdx.x >= jobs.job[j + 1].first_block) ++j;
    w = jobs.job[j].w;
    y = jobs.job[j].y;
    bias = jobs.job[j].bias;
    n = jobs.job[j].n;
    block = blockIdx.x - jobs.job[j].first_block;
    accumulate = jobs.job[j].accumulate;
  }
};

// Rows of w are spread over the block's warps: rows_per_block rows, kMatvecWarps / rows_per_block warps each.
struct RowSplit {
  int lane, warp, warps_per_row, part;
  int64_t row;
  __device__ RowSplit(unsigned block, int rows_per_block) {
    lane = threadIdx.x % kWarp;
    warp = threadIdx.x / kWarp;
    warps_per_row = kMatvecWarps / rows_per_block;
    part = warp % warps_per_row;
    row = static_cast<int64_t>(block) * rows_per_block + warp / warps_per_row;
  }
};

// Sums the per-thread partial results of each row, adds the bias, and writes (or adds to) y[mi, row].
template <int M>
__device__ __forceinline__ void finish_rows(const RowSplit& rs, const JobBlock& jb, float (&acc)[M],
                                            int rows_per_block) {
  const unsigned block = jb.block;
  const int64_t n = jb.n;
  __shared__ float partial[M][kMatvecWarps];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const float v = warp_sum(acc[mi]);
    if (rs.lane == 0) partial[mi][rs.warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < rows_per_block * M) {
    const int r = threadIdx.x / M, mi = threadIdx.x % M;
    const int64_t row = static_cast<int64_t>(block) * rows_per_block + r;
    if (row < n) {
      float s = 0.f;
      for (int p = 0; p < rs.warps_per_row; ++p) s += partial[mi][r * rs.warps_per_row + p];
      if (jb.bias) s += jb.bias[row];
      float* y = jb.y + mi * n + row;
      *y = jb.accumulate ? *y + s : s;
    }
  }
}

// Vector path: k % 8 == 0, x 16-byte aligned, plain weights 16-byte aligned.
// Adds x[mi, chunk c] · (the 8 weights in c) to acc[mi], mi < M.
template <DType T, int M>
__device__ __forceinline__ void add_chunk(const Chunk& c, const float* __restrict__ x, int k, float (&acc)[M]) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const float4 a = ldg(reinterpret_cast<const float4*>(x + mi * k + c.x0));
    const float4 b = ldg(reinterpret_cast<const float4*>(x + mi * k + c.x1));
    float s = c.v[0] * a.x;
    s = fmaf(c.v[1], a.y, s);
    s = fmaf(c.v[2], a.z, s);
    s = fmaf(c.v[3], a.w, s);
    s = fmaf(c.v[4], b.x, s);
    s = fmaf(c.v[5], b.y, s);
    s = fmaf(c.v[6], b.z, s);
    s = fmaf(c.v[7], b.w, s);
    if constexpr (T == DType::q4_1) {
      const float sx = (a.x + a.y) + (a.z + a.w) + (b.x + b.y) + (b.z + b.w);
      acc[mi] += c.d * s + c.m * sx;
    } else if constexpr (is_quantized_v<T>) {
      acc[mi] = fmaf(c.d, s, acc[mi]);
    } else {
      acc[mi] += s;
    }
  }
}

// Vector path: k % 8 == 0, x 16-byte aligned, plain weights 16-byte aligned. Each lane loads a chunk and sums it,
// the loop unrolled twice: the compiler's schedule of the loads (loading 4 or 8 chunks per lane before summing
// them measured 20-25 % slower on an H200, docs/PERFORMANCE.md).
template <DType T, int M>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_kernel(const __grid_constant__ MatvecJobs jobs, int64_t row_bytes, const float* __restrict__ x, int k,
                  int rows_per_block) {
  const JobBlock jb(jobs);
  const RowSplit rs(jb.block, rows_per_block);
  // Nothing is read before the kernel before has finished: asking this block's weights into L2 meanwhile (they do
  // not depend on it) measured slower on an H200 (docs/PERFORMANCE.md).
  wait_for_prior_grid();
  allow_next_grid();
  float acc[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = 0.f;
  if (rs.row < jb.n) {
    const char* __restrict__ wr = jb.w + rs.row * row_bytes;
    const int chunks = k / 8, step = rs.warps_per_row * kWarp;
#pragma unroll 2
    for (int g = rs.part * kWarp + rs.lane; g < chunks; g += step) {
      Chunk c;
      load_chunk<T>(wr, g, c);
      add_chunk<T, M>(c, x, k, acc);
    }
  }
  finish_rows<M>(rs, jb, acc, rows_per_block);
}

// Scalar path for any k and alignment (one element per lane and step).
template <DType T, int M>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_scalar_kernel(const __grid_constant__ MatvecJobs jobs, int64_t row_bytes, const float* __restrict__ x, int k,
                         int rows_per_block) {
  wait_for_prior_grid();
  allow_next_grid();
  const JobBlock jb(jobs);
  const char* __restrict__ w = jb.w;
  const int64_t n = jb.n;
  const RowSplit rs(jb.block, rows_per_block);
  float acc[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = 0.f;
  if (rs.row < n) {
    const char* wr = w + rs.row * row_bytes;
    for (int j = rs.part * kWarp + rs.lane; j < k; j += rs.warps_per_row * kWarp) {
      const float wv = load_elem<T>(wr, j);
#pragma unroll
      for (int mi = 0; mi < M; ++mi) acc[mi] = fmaf(wv, x[mi * k + j], acc[mi]);
    }
  }
  finish_rows<M>(rs, jb, acc, rows_per_block);
}

template <DType T>
__global__ void dequantize_kernel(const void* __restrict__ w, int64_t count, float* __restrict__ out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = load_elem<T>(w, i);
}

// x = hi + lo with hi, lo in the 16-bit type: hi carries x's leading bits, lo the rounding error of hi.
__global__ void split_f16_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ hi,
                                 __half* __restrict__ lo) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const __half h = __float2half_rn(isnan(v) ? v : fminf(fmaxf(v, -65504.f), 65504.f));
    hi[i] = h;
    lo[i] = __float2half_rn(v - __half2float(h));
  }
}

__global__ void split_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ hi,
                                  __nv_bfloat16* __restrict__ lo) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t m, int64_t n) {
  wait_for_prior_grid();
  allow_next_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % n];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <DType T, int M>
void launch_matvec(const MatvecJobs& jobs, unsigned grid, int64_t row_bytes, const float* x, int64_t k, bool vector,
                   int rows_per_block, cudaStream_t stream) {
  const int ik = static_cast<int>(k);
  if (vector)
    launch_after(matvec_kernel<T, M>, grid, kMatvecThreads, 0, stream, jobs, row_bytes, x, ik, rows_per_block);
  else
    launch_after(matvec_scalar_kernel<T, M>, grid, kMatvecThreads, 0, stream, jobs, row_bytes, x, ik, rows_per_block);
  check_launch("matvec");
}

}  // namespace

void matvec_many(DType wt, std::span<const MatvecOutput> outputs, const float* x, int64_t m, int64_t k, int sm_count,
                 cudaStream_t stream) {
  if (outputs.empty()) return;
  if (outputs.size() > static_cast<size_t>(kMaxMatvecJobs)) {
    matvec_many(wt, outputs.first(kMaxMatvecJobs), x, m, k, sm_count, stream);
    return matvec_many(wt, outputs.subspan(kMaxMatvecJobs), x, m, k, sm_count, stream);
  }
  int64_t rows = 0;
  for (const MatvecOutput& o : outputs) rows += o.n;
  // Enough blocks to cover every SM twice; the fewer rows per block, the more warps share a row.
  int rows_per_block = 1;
  for (int r : {8, 4, 2})
    if ((rows + r - 1) / r >= 2 * static_cast<int64_t>(sm_count)) {
      rows_per_block = r;
      break;
    }
  MatvecJobs jobs{};
  jobs.count = static_cast<int>(outputs.size());
  unsigned grid = 0;
  bool aligned = k % 8 == 0 && aligned16(x);
  for (int j = 0; j < jobs.count; ++j) {
    const MatvecOutput& o = outputs[static_cast<size_t>(j)];
    jobs.job[j] = {static_cast<const char*>(o.w), o.y, o.bias, o.n, grid, o.accumulate};
    grid += static_cast<unsigned>((o.n + rows_per_block - 1) / rows_per_block);
    aligned = aligned && (is_quantized(wt) || aligned16(o.w));
  }
  if (grid == 0) return;
  const int64_t row_bytes = storage_bytes(wt, k);
  dispatch_weight(wt, [&]<DType T>() {
    switch (m) {
      case 1: launch_matvec<T, 1>(jobs, grid, row_bytes, x, k, aligned, rows_per_block, stream); break;
      case 2: launch_matvec<T, 2>(jobs, grid, row_bytes, x, k, aligned, rows_per_block, stream); break;
      case 3: launch_matvec<T, 3>(jobs, grid, row_bytes, x, k, aligned, rows_per_block, stream); break;
      default: launch_matvec<T, 4>(jobs, grid, row_bytes, x, k, aligned, rows_per_block, stream); break;
    }
  });
}

void dequantize_to_f32(DType wt, const void* w, int64_t rows, int64_t k, float* out, cudaStream_t stream) {
  const int64_t count = rows * k;
  dispatch_weight(wt,
                  [&]<DType T>() { dequantize_kernel<T><<<blocks_for(count, 256), 256, 0, stream>>>(w, count, out); });
  check_launch("dequantize_to_f32");
}

void split_activations(const float* x, int64_t n, DType to, void* hi, void* lo, cudaStream_t stream) {
  if (to == DType::f16)
    split_f16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n, static_cast<__half*>(hi), static_cast<__half*>(lo));
  else
    split_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, n, static_cast<__nv_bfloat16*>(hi),
                                                              static_cast<__nv_bfloat16*>(lo));
  check_launch("split_activations");
}

void add_bias(float* y, const float* bias, int64_t m, int64_t n, cudaStream_t stream) {
  launch_after(add_bias_kernel, blocks_for(m * n, 256), 256, 0, stream, y, bias, m, n);
  check_launch("add_bias");
}

}  // namespace corolla::gpu
