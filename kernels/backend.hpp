// Backend: the one interface through which model code computes. The CPU backend (kernels/cpu/), the CUDA backend
// (kernels/cuda/) and the simulator's cost model (sim/cost_backend.hpp) implement it; a transformer block never
// knows which. Its operations are checked once, here, for every backend: each public operation validates its
// arguments (kernels/backend_contract.cpp) and then runs the backend's kernel, a protected do_ function.
//
// Conventions shared by every implementation:
// - Activations are f32. Weights may be any DType the backend lists in supports_weight().
// - Tensors are row-major and contiguous. "Rows" means the product of all dimensions but the last.
// - Positions are explicit: token i of a batch sits at positions[i] in its sequence; its K/V go to cache slot
//   positions[i], and it attends to slots 0..positions[i] (the history must be contiguous), or to the last
//   `window` of them with sliding-window attention.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/kv_pages.hpp"
#include "kernels/tensor.hpp"

namespace corolla {

class ModelledTime;  // kernels/modelled_time.hpp

#ifdef __CUDACC__
#define COROLLA_HOST_DEVICE __host__ __device__
#else
#define COROLLA_HOST_DEVICE
#endif

// How one attention weighs the slots a query may see: scores = scale · q·k; with `window` > 0 the query at slot p
// sees slots p - window + 1 .. p only (sliding-window attention, as Mistral, Qwen2 and Gemma 2 configure it), else
// 0 .. p. With `alibi_heads` > 0 (BLOOM's ALiBi, over that many query heads) head h's score for slot s gains
// alibi_slope(h) · s: a penalty growing with distance, since the softmax of a query is unchanged by a constant.
// With `softcap` > 0 (Gemma 2's attn_logit_softcapping) each score becomes softcap · tanh(score / softcap) before
// the mask and the softmax.
struct AttentionSpec {
  float scale = 1.0f;
  int64_t window = 0;
  int64_t alibi_heads = 0;
  float softcap = 0.0f;
  // scale · q·k as the softmax reads it: capped with a softcap, as Hugging Face computes it in f32.
  COROLLA_HOST_DEVICE float capped(float score) const {
    return softcap > 0.0f ? tanhf(score / softcap) * softcap : score;
  }
  // The first slot a query at slot p sees.
  COROLLA_HOST_DEVICE int64_t first_slot(int64_t p) const { return window > 0 && p >= window ? p - window + 1 : 0; }
  // Head h's ALiBi slope, as BLOOM computes them: for the largest power of two n <= heads, head h < n has
  // 2^(-8(h+1)/n), and the heads past n take the odd powers of 2^(-4/n) in turn (the slopes of 2n heads that n
  // lacks). 0 without ALiBi.
  COROLLA_HOST_DEVICE float alibi_slope(int64_t h) const {
    if (alibi_heads <= 0) return 0.0f;
    int64_t n = 1;
    while (2 * n <= alibi_heads) n *= 2;
    const double exponent = h < n ? -8.0 * static_cast<double>(h + 1) / static_cast<double>(n)
                                  : -4.0 * static_cast<double>(2 * (h - n) + 1) / static_cast<double>(n);
    return static_cast<float>(exp2(exponent));
  }
};

// The two forms of GELU in use: the exact one, x·Φ(x) with the normal CDF through erf (Falcon; PyTorch's
// nn.GELU()), and the tanh approximation (BLOOM, Gemma 2; "gelu_new", "gelu_pytorch_tanh"). kernels/gelu.hpp.
enum class Gelu { erf, tanh };

// A step's operations recorded once and replayed as one unit (a CUDA graph): a decode step of one block issues
// ~15 kernels, and launching them one by one costs more than their work at small batch. Everything the recorded
// operations read is fixed at recording (tensors' addresses and shapes, host arrays, the weights) except two
// inputs that each replay gives anew: `io`, the tensor the operations transform in place, copied into and back
// out of the recording's own buffer, and the positions (their count is fixed).
class Recording {
 public:
  virtual ~Recording() = default;
  // Runs the recorded operations on `io` (the recorded shape, on the backend's device) at `positions`. Throws
  // std::invalid_argument for another shape or count, or a position outside what the recorded operations
  // allow (a KV cache's slots): a replay does not run the operations' own checks.
  virtual void replay(Tensor& io, std::span<const int32_t> positions) = 0;
};

// Empty when `cache` can take keys and values at `positions`: every position >= 0 and, unless the cache is a
// ring, below its slots; otherwise what is wrong. (The one check of every backend's kv_write.)
inline std::string kv_writes_problem(const KvPages& cache, std::span<const int32_t> positions) {
  const int64_t slots = cache.slots();
  for (int32_t p : positions)
    if (p < 0 || (!cache.ring && p >= slots))
      return "position " + std::to_string(p) + " outside the cache of " + std::to_string(slots) + " tokens";
  return {};
}

// Empty when each of the `batch` sequences' `tokens` queries at `positions` reads only positions the cache holds
// after this step's keys are written: a cache that is not a ring holds positions below its slots; a ring holds
// the last slots() positions up to the latest written (this step's last), so every slot the earliest query of the
// step sees must come after that latest position minus slots(). (The one check of every backend's attention.)
inline std::string kv_reads_problem(const KvPages& cache, std::span<const int32_t> positions, int64_t batch,
                                    int64_t tokens, const AttentionSpec& spec) {
  if (auto problem = kv_writes_problem(cache, positions); !problem.empty()) return problem;
  if (!cache.ring) return {};
  const int64_t slots = cache.slots();
  for (int64_t b = 0; b < batch; ++b) {
    const auto* p = positions.data() + b * tokens;
    if (tokens <= 0) continue;
    const int64_t latest = *std::max_element(p, p + tokens), earliest = *std::min_element(p, p + tokens);
    if (spec.first_slot(earliest) <= latest - slots)
      return "a query at " + std::to_string(earliest) + " sees positions from " +
             std::to_string(spec.first_slot(earliest)) + ", which a ring of " + std::to_string(slots) +
             " holding up to " + std::to_string(latest) + " no longer has";
  }
  return {};
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual bool supports_weight(DType dtype) const = 0;
  // Whether KV pools of `dtype` may hold this backend's caches (f32 everywhere; f16 where the backend reads it).
  virtual bool supports_kv(DType dtype) const { return dtype == DType::f32; }

  // --- memory -------------------------------------------------------------------------------------------------
  // A zero-filled tensor on this backend's device.
  virtual Tensor alloc(DType dtype, Shape shape) = 0;
  // A zero-filled tensor the size of a budget (a KV pool), whose memory is taken as it is first written where the
  // device allows (the CPU maps it untouched), else at once.
  virtual Tensor alloc_reserve(DType dtype, Shape shape) { return alloc(dtype, shape); }
  // Host -> device. The CPU backend returns its argument (no copy).
  virtual Tensor upload(const Tensor& host) = 0;
  // Host weights -> the form this backend computes with: upload() unless the backend wants them laid out
  // otherwise (the CPU backend copies matrices into page-aligned, huge-page memory where that reads faster and
  // interleaves the rows of quantized ones, kernels/cpu/weight_placement.hpp).
  virtual Tensor upload_weight(const Tensor& host) { return upload(host); }
  // The inverse: a weight from upload_weight back on the host in its file's dtype and layout (what the node store's
  // weights cache keeps, so that any backend can read it back).
  virtual Tensor download_weight(const Tensor& placed) { return download(placed); }
  // Device -> host. The CPU backend returns its argument (no copy).
  virtual Tensor download(const Tensor& t) = 0;
  // A copy of `t` (on its device) that the caller may write into while `t` stays intact.
  virtual Tensor copy(const Tensor& t) { return t.clone(); }
  // Waits until queued work is done (a no-op where work is synchronous).
  virtual void synchronize() {}
  // Host memory for hidden states a server assembles from several messages or splits among several (a batch's
  // input, a chunked prompt's output), its contents unspecified until written, and the copies of rows into it. The
  // simulator's cost model answers with tensors like those it computes on (without storage) and copies only into
  // tensors that have storage: the assembling costs it no memory.
  virtual Tensor alloc_host(DType dtype, Shape shape) { return Tensor::empty(dtype, shape); }
  // Rows [src_row, src_row + rows) of `src` into rows [dst_row, dst_row + rows) of `dst`, both host tensors of one
  // dtype seen as [rows, last dimension] with the same last dimension; the caller checks the bounds.
  virtual void copy_host_rows(const Tensor& src, int64_t src_row, Tensor& dst, int64_t dst_row, int64_t rows);
  // A backend that reports its work's time instead of spending it (the simulator's cost model) returns its
  // ModelledTime; the others nullptr. Asked once per block and step: a virtual call, not a cross-cast.
  virtual ModelledTime* modelled_time() { return nullptr; }
  // Records what `ops` issues on this backend when given a tensor shaped like `io` and positions like
  // `positions`, without running it (the returned Recording runs it). nullptr where the backend does not record
  // (it computes as it is called: the CPU) or `ops` did what cannot be recorded (waited for the device, copied to
  // the host, threw): then nothing ran and the caller runs `ops` itself. The backend must outlive the recording.
  using RecordedOps = std::function<void(Tensor& io, std::span<const int32_t> positions)>;
  virtual std::unique_ptr<Recording> record(const Tensor& io, std::span<const int32_t> positions,
                                            const RecordedOps& ops) {
    (void)io, (void)positions, (void)ops;
    return nullptr;
  }

  // --- operations ---------------------------------------------------------------------------------------------
  // y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N] if bias is given).
  void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
  // y[M, N] += x[M, K] · w[N, K]ᵀ (+ bias[N]): a projection added to the residual stream. One pass where the
  // backend can (the CUDA matrix-vector kernel and GEMM accumulate into y); by default a matmul into a temporary
  // and an add.
  void matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);
  // Several projections of one input: ys[i] = x · ws[i]ᵀ (+ biases[i] where given). One call lets a backend run
  // them as one job (the CPU backend splits decode's q/k/v, or gate/up, over its threads together: fewer waits
  // for the slowest thread); by default they run one after the other.
  void matmul_many(const Tensor& x, std::span<const Tensor* const> ws, std::span<const Tensor* const> biases,
                   std::span<Tensor* const> ys);
  // Per row of x[M, D]: y = x / sqrt(mean(x²) + eps) * w.
  void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);
  // Per row of x[M, D]: y = (x - mean) / sqrt(var + eps) * w + b.
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y);
  // Rotary embedding in place on x[N, H, Dh] (N = batch·tokens), rotate-half layout as in Hugging Face:
  // pairs (i, i + R/2) rotate by angle positions[n] · inv_freq[i], i < R/2, R = 2·inv_freq.size(): Dh, or the
  // rotated part of each head (Phi-3's partial rotary, the other values pass). `scale`
  // multiplies cos and sin (a RoPE scaling's attention factor where it cannot be folded into the attention's scale:
  // with partial rotary the passed values keep theirs). The rotation is orthogonal, so rope
  // with negated positions is its inverse (up to scale²) and its gradient.
  void rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, float scale = 1.0f);
  // out = silu(gate) · up, elementwise.
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
  // out = gelu(gate) · up, elementwise (GeGLU: Gemma 2's MLP with the tanh form); out may be gate or up.
  void gelu_mul(const Tensor& gate, const Tensor& up, Gelu form, Tensor& out);
  // out = gelu(x), elementwise; out may be x.
  void gelu(const Tensor& x, Gelu form, Tensor& out);
  // out = a + b, elementwise; out may be a.
  void add(const Tensor& a, const Tensor& b, Tensor& out);
  // Softmax over the last dimension, in place.
  void softmax(Tensor& x);
  // Stores k, v [B, T, Hkv, Dh] into the cache's slots positions[b·T + t] (B = cache.batch).
  void kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> positions, const KvPages& cache);
  // rope(q) and rope(k) in place, then kv_write(k, v) at the same positions: q [B·T, Hq, Dh], k, v [B·T, Hkv, Dh].
  // One pass where the backend can (a decode step's three position-dependent operations); by default the three
  // calls.
  void rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                     std::span<const float> inv_freq, const KvPages& cache);
  // Causal grouped-query attention. q [B, T, Hq, Dh] attends, per token, to the cache's slots
  // spec.first_slot(p)..p of its sequence, p = positions[b·T + t] (query head h uses KV head h / (Hq / Hkv));
  // out [B, T, Hq·Dh].
  void attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions, const AttentionSpec& spec,
                 Tensor& out);
  // out[i, :] = scale · table[ids[i], :] as f32; table [V, D] of any weight dtype (scale: Gemma's √hidden, else 1).
  void embed(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out);
  // out[i, :] = x[rows[i], :] for x [M, D] and out [R, D], R = rows.size() (the tokens routed to one expert).
  void gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out);
  // out[rows[i], :] += scale[i] · x[i, :] for x [R, D] and out [M, D]; `rows` are distinct (an expert's output added
  // to the tokens routed to it, weighted by the router).
  void scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale, Tensor& out);

  // --- gradients ----------------------------------------------------------------------------------------------
  // Training keeps block weights frozen: these give gradients with respect to activations, plus the weight
  // gradient of a client's own small f32 matrices (a classification head). All f32.
  // dx[M, K] = dy[M, N] · w[N, K]: the gradient of matmul with respect to x (w of any weight dtype).
  void matmul_backward(const Tensor& dy, const Tensor& w, Tensor& dx);
  // dw[N, K] += dy[M, N]ᵀ · x[M, K]: the gradient of matmul with respect to an f32 weight, accumulated.
  void matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw);
  // Per row of x[M, D]: dx = the gradient of rms_norm(x, w, eps) with respect to x, given dy.
  void rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx);
  // Per row of x[M, D]: dx = the gradient of layer_norm(x, w, b, eps) with respect to x, given dy.
  void layer_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx);
  // For out = gelu(x): dx = gelu'(x) · d_out (dx may be d_out).
  void gelu_backward(const Tensor& x, Gelu form, const Tensor& d_out, Tensor& dx);
  // For out = silu(gate) · up: d_gate and d_up from d_out (d_gate may be d_out).
  void silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& d_out, Tensor& d_gate, Tensor& d_up);
  // For out = gelu(gate) · up: the same (d_gate may be d_out).
  void gelu_mul_backward(const Tensor& gate, const Tensor& up, Gelu form, const Tensor& d_out, Tensor& d_gate,
                         Tensor& d_up);
  // The gradient of causal self-attention within each sequence (the stateless forward: query t of a sequence
  // attends to keys spec.first_slot(t)..t of the same sequence). q [B, T, Hq, Dh], k, v [B, T, Hkv, Dh] (after
  // RoPE), d_out [B, T, Hq·Dh]; writes dq, dk, dv shaped like q, k, v. The softmax is recomputed from q and k.
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                          const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv);

 protected:
  // --- the kernels ----------------------------------------------------------------------------------------------
  // Each public operation above checks its arguments against the contract written there (every shape, dtype,
  // device, position and page: kernels/backend_contract.cpp, one place for all backends) and then calls its kernel
  // here, which may take them as valid. A kernel checks only what its own backend cannot do (a CUDA kernel's
  // largest head size, cuBLAS's 32-bit dimensions).
  virtual void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  // By default a matmul into a temporary and an add.
  virtual void do_matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
    Tensor t = alloc(DType::f32, y.shape());
    do_matmul(x, w, bias, t);
    do_add(y, t, y);
  }
  // By default one matmul after the other.
  virtual void do_matmul_many(const Tensor& x, std::span<const Tensor* const> ws, std::span<const Tensor* const> biases,
                              std::span<Tensor* const> ys) {
    for (size_t i = 0; i < ws.size(); ++i) do_matmul(x, *ws[i], biases[i], *ys[i]);
  }
  virtual void do_rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) = 0;
  virtual void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) = 0;
  virtual void do_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, float scale) = 0;
  virtual void do_silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void do_gelu_mul(const Tensor& gate, const Tensor& up, Gelu form, Tensor& out) = 0;
  virtual void do_gelu(const Tensor& x, Gelu form, Tensor& out) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void do_softmax(Tensor& x) = 0;
  virtual void do_kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                           const KvPages& cache) = 0;
  // By default rope twice and a kv_write (k, v as [B, T, Hkv, Dh]).
  virtual void do_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                                std::span<const float> inv_freq, const KvPages& cache) {
    do_rope(q, positions, inv_freq, 1.0f);
    do_rope(k, positions, inv_freq, 1.0f);
    const Shape kv{cache.batch, k.dim(0) / cache.batch, k.dim(1), k.dim(2)};
    do_kv_write(k.reshaped(kv), v.reshaped(kv), positions, cache);
  }
  virtual void do_attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                            const AttentionSpec& spec, Tensor& out) = 0;
  virtual void do_embed(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out) = 0;
  virtual void do_gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) = 0;
  virtual void do_scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale,
                                   Tensor& out) = 0;
  virtual void do_matmul_backward(const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  virtual void do_matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw) = 0;
  virtual void do_rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) = 0;
  virtual void do_layer_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) = 0;
  virtual void do_gelu_backward(const Tensor& x, Gelu form, const Tensor& d_out, Tensor& dx) = 0;
  virtual void do_silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& d_out, Tensor& d_gate,
                                    Tensor& d_up) = 0;
  virtual void do_gelu_mul_backward(const Tensor& gate, const Tensor& up, Gelu form, const Tensor& d_out,
                                    Tensor& d_gate, Tensor& d_up) = 0;
  virtual void do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                     const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv) = 0;

 private:
  // The contract's check of an activation: f32 on this backend's device.
  void require_f32(const Tensor& t, const char* op, const char* arg) const;
  void require_f32(const char* op, std::initializer_list<const Tensor*> tensors) const;
  void check_matmul(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) const;
  void check_kv(const char* op, const KvPages& cache, int64_t kv_heads, int64_t head_dim) const;
};

// "cpu" or "cuda" / "cuda:N". Throws std::runtime_error naming what is missing (no CUDA build, no GPU).
std::unique_ptr<Backend> make_backend(std::string_view device, int cpu_threads = 0);
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);
// True when this build has the CUDA backend and a GPU answers.
bool cuda_available();

}  // namespace corolla
