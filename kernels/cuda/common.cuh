// Device helpers shared by the CUDA kernels: launch checks, dtype dispatch, warp and block reductions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/decode.cuh"
#include "kernels/cuda/launch.hpp"
#include "kernels/dtype.hpp"

namespace corolla::gpu {

inline constexpr int kWarp = 32;

// Checks the last kernel launch.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Programmatic dependent launch (sm_90 and later): a kernel launched through launch_after() may start while the
// kernel before it on the stream is finishing, instead of after it: a decode step is ~10 small kernels per layer,
// each otherwise paying its launch after the last one's tail. Such a kernel calls wait_for_prior_grid() before it
// reads anything (it returns once the kernel before has completed and its writes are visible) and then
// allow_next_grid(), which lets the next one be scheduled. Off unless programmatic_launch(true) was called
// (the CUDA backend does on sm_90+ GPUs, unless COROLLA_CUDA_PDL=0; launch.hpp).

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <class... Params, class... Args>
void launch_after(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  check(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...), "cudaLaunchKernelEx");
}

inline unsigned blocks_for(int64_t n, int threads, int64_t cap = 65536) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

// Calls f.template operator()<T>() for the weight dtype t (f32, f16, bf16, q8_0, q4_0, q4_1).
template <class F>
void dispatch_weight(DType t, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<DType::f32>(); return;
    case DType::f16: f.template operator()<DType::f16>(); return;
    case DType::bf16: f.template operator()<DType::bf16>(); return;
    case DType::q8_0: f.template operator()<DType::q8_0>(); return;
    case DType::q4_0: f.template operator()<DType::q4_0>(); return;
    case DType::q4_1: f.template operator()<DType::q4_1>(); return;
    default: break;
  }
  throw_cuda_error(cudaErrorInvalidValue, "weight dtype not supported by the CUDA kernels");
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = (blockDim.x + kWarp - 1) / kWarp;
  __syncthreads();  // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? scratch[lane] : 0.f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = (blockDim.x + kWarp - 1) / kWarp;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

}  // namespace corolla::gpu
