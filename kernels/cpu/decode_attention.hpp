// The two products of a decode step's attention over one run of a KV cache (kernels/cpu/attention.cpp): the
// scores of a few query rows against the run's keys, and the rows' weighted sum of its values. A decode step's
// query heads that share a KV head are a block of 1-8 rows (3 in the demo model) against a history of tens to
// thousands of keys: products too small for a GEMM library to pay off its setup. These kernels keep each row's
// sums in registers and read each key and value once per row block; every row's result is computed alone, in an
// order that does not depend on how many rows share the call (a session's tokens must not depend on its batch).
// With them, the conversions of an f16 KV cache: rounding keys and values as they are written, widening a run for
// prefill's sgemm.
//
// AVX2 and AVX-512 sets, chosen with the matrix-vector kernels (the same CPU check and COROLLA_ISA cap); the
// scalar set has none, and oneDNN's sgemm runs the products there (the scalar f16 conversions of kernels/dtype.hpp the
// rest). Only decode_attention_avx2.cpp and
// decode_attention_avx512.cpp are compiled with ISA flags.
#pragma once

#include <cstdint>
#include <vector>

namespace corolla {

struct DecodeAttentionKernels {
  const char* isa;  // "avx2", "avx512"
  // head_dim must be a multiple of this (otherwise oneDNN runs the products).
  int64_t lanes;
  // scores[r · lds + s] = scale · Σ_d q[r · ldq + d] · k[s · ldk + d] for r < rows, s < keys, d < head_dim.
  void (*scores)(const float* q, int64_t ldq, int64_t rows, const float* k, int64_t ldk, int64_t keys, int64_t head_dim,
                 float scale, float* scores, int64_t lds);
  // out[r · ldo + d] = (accumulate ? out[r · ldo + d] : 0) + Σ_s p[r · ldp + s] · v[s · ldv + d].
  void (*values)(const float* p, int64_t ldp, int64_t rows, const float* v, int64_t ldv, int64_t keys, int64_t head_dim,
                 float* out, int64_t ldo, bool accumulate);
  // The same over a cache of f16 keys and values, each widened exactly to f32: the bits of `scores` and `values`
  // over an f32 cache holding the same values.
  void (*scores_f16)(const float* q, int64_t ldq, int64_t rows, const uint16_t* k, int64_t ldk, int64_t keys,
                     int64_t head_dim, float scale, float* scores, int64_t lds);
  void (*values_f16)(const float* p, int64_t ldp, int64_t rows, const uint16_t* v, int64_t ldv, int64_t keys,
                     int64_t head_dim, float* out, int64_t ldo, bool accumulate);
  // dst[r · cols + c] = src[r · ld + c] widened to f32, for r < rows, c < cols: a run of an f16 cache's keys or
  // values for oneDNN's sgemm (prefill).
  void (*widen_f16)(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* dst);
  // dst[i] = src[i] rounded to f16 (to nearest even, as f32_to_f16) for i < n: keys and values into an f16 cache.
  void (*narrow_f16)(const float* src, uint16_t* dst, int64_t n);
};

#if defined(COROLLA_HAVE_X86_KERNELS)
// Call them only on a CPU that runs them.
const DecodeAttentionKernels& avx2_decode_attention_kernels();
const DecodeAttentionKernels& avx512_decode_attention_kernels();
#endif

// Every set this CPU runs (none on a CPU without AVX2).
std::vector<const DecodeAttentionKernels*> available_decode_attention_kernels();
// The set of the instruction set best_matvec_kernels() chose, or null (oneDNN's sgemm).
const DecodeAttentionKernels* best_decode_attention_kernels();

}  // namespace corolla
