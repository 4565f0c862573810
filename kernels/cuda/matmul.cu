// Matrix multiplication kernels: the matrix-vector product for decode (weights read once, as stored) and the
// helpers of the cuBLAS path for prefill (weight dequantization and activation splits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"

namespace corolla::gpu {
namespace {

constexpr int kMatvecWarps = 8;
constexpr int kMatvecThreads = kMatvecWarps * kWarp;

// Rows of w are spread over the block's warps: rows_per_block rows, kMatvecWarps / rows_per_block warps each.
struct RowSplit {
  int lane, warp, warps_per_row, part;
  int64_t row;
  __device__ RowSplit(int rows_per_block) {
    lane = threadIdx.x % kWarp;
    warp = threadIdx.x / kWarp;
    warps_per_row = kMatvecWarps / rows_per_block;
    part = warp % warps_per_row;
    row = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp / warps_per_row;
  }
};

// Sums the per-thread partial results of each row and writes y[mi, row].
template <int M>
__device__ __forceinline__ void finish_rows(const RowSplit& rs, float (&acc)[M], float* y, int64_t n,
                                            int rows_per_block) {
  __shared__ float partial[M][kMatvecWarps];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    const float v = warp_sum(acc[mi]);
    if (rs.lane == 0) partial[mi][rs.warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < rows_per_block * M) {
    const int r = threadIdx.x / M, mi = threadIdx.x % M;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + r;
    if (row < n) {
      float s = 0.f;
      for (int p = 0; p < rs.warps_per_row; ++p) s += partial[mi][r * rs.warps_per_row + p];
      y[mi * n + row] = s;
    }
  }
}

// Vector path: k % 8 == 0, x 16-byte aligned, plain weights 16-byte aligned.
template <DType T, int M>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_kernel(const char* __restrict__ w, int64_t row_bytes, const float* __restrict__ x, float* __restrict__ y,
                  int64_t n, int k, int rows_per_block) {
  const RowSplit rs(rows_per_block);
  float acc[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) acc[mi] = 0.f;
  if (rs.row < n) {
    const char* wr = w + rs.row * row_bytes;
    const int chunks = k / 8, step = rs.warps_per_row * kWarp;
#pragma unroll 2
    for (int g = rs.part * kWarp + rs.lane; g < chunks; g += step) {
      Chunk c;
      load_chunk<T>(wr, g, c);
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
  }
  finish_rows<M>(rs, acc, y, n, rows_per_block);
}

// Scalar path for any k and alignment (one element per lane and step).
template <DType T, int M>
__global__ void __launch_bounds__(kMatvecThreads)
    matvec_scalar_kernel(const char* __restrict__ w, int64_t row_bytes, const float* __restrict__ x,
                         float* __restrict__ y, int64_t n, int k, int rows_per_block) {
  const RowSplit rs(rows_per_block);
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
  finish_rows<M>(rs, acc, y, n, rows_per_block);
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
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += bias[i % n];
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <DType T, int M>
void launch_matvec(const void* w, int64_t row_bytes, const float* x, float* y, int64_t n, int64_t k, bool vector,
                   int rows_per_block, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block);
  const auto* wb = static_cast<const char*>(w);
  if (vector)
    matvec_kernel<T, M><<<grid, kMatvecThreads, 0, stream>>>(wb, row_bytes, x, y, n, static_cast<int>(k),
                                                             rows_per_block);
  else
    matvec_scalar_kernel<T, M><<<grid, kMatvecThreads, 0, stream>>>(wb, row_bytes, x, y, n, static_cast<int>(k),
                                                                    rows_per_block);
  check_launch("matvec");
}

}  // namespace

void matvec(DType wt, const void* w, const float* x, float* y, int64_t m, int64_t n, int64_t k, int sm_count,
            cudaStream_t stream) {
  // Enough blocks to cover every SM twice; the fewer rows per block, the more warps share a row.
  int rows_per_block = 1;
  for (int r : {8, 4, 2})
    if ((n + r - 1) / r >= 2 * static_cast<int64_t>(sm_count)) {
      rows_per_block = r;
      break;
    }
  const int64_t row_bytes = storage_bytes(wt, k);
  const bool vector = k % 8 == 0 && aligned16(x) && (is_quantized(wt) || aligned16(w));
  dispatch_weight(wt, [&]<DType T>() {
    switch (m) {
      case 1: launch_matvec<T, 1>(w, row_bytes, x, y, n, k, vector, rows_per_block, stream); break;
      case 2: launch_matvec<T, 2>(w, row_bytes, x, y, n, k, vector, rows_per_block, stream); break;
      case 3: launch_matvec<T, 3>(w, row_bytes, x, y, n, k, vector, rows_per_block, stream); break;
      default: launch_matvec<T, 4>(w, row_bytes, x, y, n, k, vector, rows_per_block, stream); break;
    }
  });
}

void dequantize_to_f32(DType wt, const void* w, int64_t rows, int64_t k, float* out, cudaStream_t stream) {
  const int64_t count = rows * k;
  dispatch_weight(wt, [&]<DType T>() {
    dequantize_kernel<T><<<blocks_for(count, 256), 256, 0, stream>>>(w, count, out);
  });
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
  add_bias_kernel<<<blocks_for(m * n, 256), 256, 0, stream>>>(y, bias, m, n);
  check_launch("add_bias");
}

}  // namespace corolla::gpu
