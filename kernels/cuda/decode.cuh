// Decoding of stored weights, compiled for the device and for the host (where tests check it against
// kernels/dtype.cpp without a GPU): single elements of any weight dtype, and chunks of eight for the
// matrix-vector kernel.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/dtype.hpp"

namespace corolla::gpu {

// __ldg on the device, a plain load on the host.
template <class T>
__host__ __device__ __forceinline__ T ldg(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}

__host__ __device__ __forceinline__ float f16_bits_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__host__ __device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

template <DType T>
inline constexpr bool is_quantized_v = T == DType::q8_0 || T == DType::q4_0 || T == DType::q4_1;

// Element j of a row stored as dtype T (for quantized types, j counts from the start of a block).
template <DType T>
__host__ __device__ __forceinline__ float load_elem(const void* row, int64_t j) {
  if constexpr (T == DType::f32) {
    return static_cast<const float*>(row)[j];
  } else if constexpr (T == DType::f16) {
    return f16_bits_to_f32(static_cast<const uint16_t*>(row)[j]);
  } else if constexpr (T == DType::bf16) {
    return bf16_bits_to_f32(static_cast<const uint16_t*>(row)[j]);
  } else if constexpr (T == DType::q8_0) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row) + j / kQuantBlock;
    return f16_bits_to_f32(b->d) * static_cast<float>(b->qs[j % kQuantBlock]);
  } else if constexpr (T == DType::q4_0) {
    const BlockQ4_0* b = static_cast<const BlockQ4_0*>(row) + j / kQuantBlock;
    const int i = static_cast<int>(j % kQuantBlock);
    const uint8_t byte = b->qs[i & 15];
    const int q = i < 16 ? (byte & 0x0f) : (byte >> 4);
    return f16_bits_to_f32(b->d) * static_cast<float>(q - 8);
  } else {
    static_assert(T == DType::q4_1);
    const BlockQ4_1* b = static_cast<const BlockQ4_1*>(row) + j / kQuantBlock;
    const int i = static_cast<int>(j % kQuantBlock);
    const uint8_t byte = b->qs[i & 15];
    const int q = i < 16 ? (byte & 0x0f) : (byte >> 4);
    return f16_bits_to_f32(b->d) * static_cast<float>(q) + f16_bits_to_f32(b->m);
  }
}

// Eight weights of chunk g of a row (chunks of 8 consecutive storage elements), and where the activations that
// pair with them start: v[0..3] pair with x[x0..x0+3], v[4..7] with x[x1..x1+3]. Plain types give the weights
// themselves; quantized types give the integers, with value = d · v (+ m for q4_1).
struct Chunk {
  float v[8];
  float d, m;
  int x0, x1;
};

__host__ __device__ __forceinline__ void unpack_bf16x2(uint32_t u, float* out) {
  out[0] = bf16_bits_to_f32(static_cast<uint16_t>(u & 0xffffu));
  out[1] = bf16_bits_to_f32(static_cast<uint16_t>(u >> 16));
}

__host__ __device__ __forceinline__ void unpack_f16x2(uint32_t u, float* out) {
  out[0] = f16_bits_to_f32(static_cast<uint16_t>(u & 0xffffu));
  out[1] = f16_bits_to_f32(static_cast<uint16_t>(u >> 16));
}

template <DType T>
__host__ __device__ __forceinline__ void load_chunk(const char* row, int g, Chunk& c) {
  if constexpr (T == DType::f32) {
    const float4* p = reinterpret_cast<const float4*>(row) + 2 * g;
    const float4 a = ldg(p), b = ldg(p + 1);
    c.v[0] = a.x, c.v[1] = a.y, c.v[2] = a.z, c.v[3] = a.w;
    c.v[4] = b.x, c.v[5] = b.y, c.v[6] = b.z, c.v[7] = b.w;
    c.x0 = 8 * g, c.x1 = 8 * g + 4;
  } else if constexpr (T == DType::f16 || T == DType::bf16) {
    const uint4 u = ldg(reinterpret_cast<const uint4*>(row) + g);
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::f16)
        unpack_f16x2(words[i], c.v + 2 * i);
      else
        unpack_bf16x2(words[i], c.v + 2 * i);
    }
    c.x0 = 8 * g, c.x1 = 8 * g + 4;
  } else if constexpr (T == DType::q8_0) {
    // Four chunks per block; chunk i holds quants 8i..8i+7 (consecutive activations).
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + (g >> 2);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b->qs) + 4 * (g & 3);
    for (int i = 0; i < 4; ++i) {
      const uint16_t u = ldg(qs + i);
      c.v[2 * i] = static_cast<float>(static_cast<int8_t>(u & 0xff));
      c.v[2 * i + 1] = static_cast<float>(static_cast<int8_t>(u >> 8));
    }
    c.d = f16_bits_to_f32(ldg(&b->d));
    c.m = 0.f;
    c.x0 = 8 * g, c.x1 = 8 * g + 4;
  } else {
    // q4_0 / q4_1: chunk i of a block holds bytes 4i..4i+3, i.e. values 4i..4i+3 (low nibbles) and
    // 16+4i..16+4i+3 (high nibbles).
    static_assert(T == DType::q4_0 || T == DType::q4_1);
    using Block = std::conditional_t<T == DType::q4_0, BlockQ4_0, BlockQ4_1>;
    const Block* b = reinterpret_cast<const Block*>(row) + (g >> 2);
    const uint16_t* qs = reinterpret_cast<const uint16_t*>(b->qs) + 2 * (g & 3);
    const uint16_t u0 = ldg(qs), u1 = ldg(qs + 1);
    const int bytes[4] = {u0 & 0xff, u0 >> 8, u1 & 0xff, u1 >> 8};
    constexpr int offset = T == DType::q4_0 ? 8 : 0;
    for (int j = 0; j < 4; ++j) {
      c.v[j] = static_cast<float>((bytes[j] & 0x0f) - offset);
      c.v[4 + j] = static_cast<float>((bytes[j] >> 4) - offset);
    }
    c.d = f16_bits_to_f32(ldg(&b->d));
    if constexpr (T == DType::q4_1)
      c.m = f16_bits_to_f32(ldg(&b->m));
    else
      c.m = 0.f;
    c.x0 = 32 * (g >> 2) + 4 * (g & 3), c.x1 = c.x0 + 16;
  }
}

}  // namespace corolla::gpu
