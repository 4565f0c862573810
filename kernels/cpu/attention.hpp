// Causal grouped-query attention over a KV cache on the CPU (the Backend::attention contract).
// Few query tokens (decode): per token, the query heads sharing a KV head as one block of rows, scores = Q·Kᵀ and
// out = P·V over the cache in place (per run of consecutive pool rows the slots lie in: usually one,
// kernels/kv_pages.hpp), by the AVX2 / AVX-512 products of decode_attention.hpp, which read a token's KV heads a tile
// of slots at a time (oneDNN's sgemm where the CPU has neither or a head's size is not a multiple of a vector).
// Many (prefill): per
// (sequence, head) and block of kAttentionQueryBlock queries, scores = Q·Kᵀ and out = P·V as two oneDNN sgemm
// calls over the cache in place (strided, no gathering), with the causal mask and softmax between them. Each
// block multiplies only the cache slots its queries may see, so a causal prompt costs about half a full square
// (and a sliding window only the band of slots under it).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/backend.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

// From this many query tokens per sequence the GEMM path is used.
inline constexpr int64_t kAttentionGemmTokens = 8;
// Queries per GEMM block on that path.
inline constexpr int64_t kAttentionQueryBlock = 64;

// Backend::attention on the CPU (the arguments and positions checked by the caller).
void cpu_attention(ThreadPool& pool, const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                   const AttentionSpec& spec, Tensor& out);

}  // namespace corolla
