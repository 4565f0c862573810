// The gradient of the stateless causal self-attention (Backend::attention_backward) on the CPU.
// Per (sequence, KV head), for each query head h of the group, with S = scale · Q Kᵀ (causal, and within the
// sliding window when the spec has one), P = softmax(S):
//   dV += Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − rowsum(dP ∘ P)),   dQ = scale · dS K,   dK += scale · dSᵀ Q.
// Work is split by (sequence, KV head), so the heads that share a KV head accumulate into dK and dV in one thread.
#pragma once

#include "kernels/backend.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

void cpu_attention_backward(ThreadPool& pool, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                            const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace corolla
