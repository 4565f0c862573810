// Backend's public operations: each checks its arguments against the contract in kernels/backend.hpp, then runs
// the backend's kernel. The one place every backend's arguments are checked: a kernel may take them as valid.
// The checks run on every call; each builds its message only when it fails.
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace corolla {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

int64_t last_dim(const Tensor& t) { return t.rank() == 0 ? 1 : t.dim(-1); }

const char* device_name(Device d) { return d == Device::cuda ? "CUDA" : "host"; }

void require_same_size(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->numel() != (*tensors.begin())->numel()) fail(std::string(op) + ": shapes differ");
}

void check_spec(const char* op, const AttentionSpec& spec, int64_t query_heads) {
  if (!(spec.window >= 0)) fail(std::string(op) + ": a negative window");
  if (!(std::isfinite(spec.softcap) && spec.softcap >= 0))
    fail(std::string(op) + ": a soft cap that is not a number >= 0");
  if (!(spec.alibi_heads == 0 || spec.alibi_heads == query_heads))
    fail(std::string(op) + ": ALiBi over a head count other than q's");
}

void check_rope_frequencies(const char* op, std::span<const float> inv_freq, int64_t head_dim) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  if (!(half > 0 && 2 * half <= head_dim))
    fail(std::string(op) + ": inv_freq has " + std::to_string(inv_freq.size()) + " entries for heads of " +
         std::to_string(head_dim) + " (1..head_dim/2)");
}

}  // namespace

void Backend::require_f32(const Tensor& t, const char* op, const char* arg) const {
  if (!(t.dtype() == DType::f32 && t.device() == device()))
    fail(std::string(op) + ": " + arg + " must be a " + device_name(device()) + " f32 tensor, got " + t.describe() +
         (t.device() == device() ? "" : std::string(" on the ") + device_name(t.device())));
}

void Backend::require_f32(const char* op, std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors) require_f32(*t, op, "tensors");
}

void Backend::check_matmul(const char* op, const Tensor& x, const Tensor& w, const Tensor* bias,
                           const Tensor& y) const {
  require_f32(x, op, "x");
  require_f32(y, op, "y");
  if (!(w.rank() == 2 && supports_weight(w.dtype()))) fail(std::string(op) + ": unsupported weight " + w.describe());
  if (w.device() != device())
    fail(std::string(op) + ": weight " + w.describe() + " is on the " + device_name(w.device()) +
         " (upload it to this backend first)");
  const int64_t k = w.dim(1), n = w.dim(0), m = x.rows();
  if (!(x.rank() >= 1 && x.dim(-1) == k))
    fail(std::string(op) + ": x " + x.describe() + " does not match weight " + w.describe());
  if (!(y.rank() >= 1 && y.rows() == m && y.dim(-1) == n))
    fail(std::string(op) + ": output " + y.describe() + " is not [" + std::to_string(m) + ", " + std::to_string(n) +
         "]");
  if (bias) {
    require_f32(*bias, op, "bias");
    if (!(bias->numel() == n))
      fail(std::string(op) + ": bias " + bias->describe() + " does not match " + std::to_string(n));
  }
}

void Backend::check_kv(const char* op, const KvPages& cache, int64_t kv_heads, int64_t head_dim) const {
  if (auto problem = kv_pages_problem(cache, kv_heads, head_dim); !problem.empty())
    fail(std::string(op) + ": " + problem);
  if (!supports_kv(cache.k.dtype()))
    fail(std::string(op) + ": the " + name() + " backend keeps no KV cache in " +
         std::string(dtype_name(cache.k.dtype())));
  if (cache.k.device() != device() || cache.v.device() != device())
    fail(std::string(op) + ": a KV pool on the " + device_name(cache.k.device()) + " for a " + device_name(device()) +
         " backend");
}

// --- operations ---------------------------------------------------------------------------------------------------

void Backend::matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  check_matmul("matmul", x, w, bias, y);
  do_matmul(x, w, bias, y);
}

void Backend::matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  check_matmul("matmul_add", x, w, bias, y);
  do_matmul_add(x, w, bias, y);
}

void Backend::matmul_many(const Tensor& x, std::span<const Tensor* const> ws, std::span<const Tensor* const> biases,
                          std::span<Tensor* const> ys) {
  if (!(biases.size() == ws.size() && ys.size() == ws.size())) fail("matmul_many: as many weights, biases and outputs");
  for (size_t i = 0; i < ws.size(); ++i) check_matmul("matmul_many", x, *ws[i], biases[i], *ys[i]);
  if (!ws.empty()) do_matmul_many(x, ws, biases, ys);
}

void Backend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  for (const auto& [t, arg] : {std::pair{&x, "x"}, {&w, "weight"}, {&y, "y"}}) require_f32(*t, "rms_norm", arg);
  if (!(w.numel() == last_dim(x) && y.numel() == x.numel()))
    fail("rms_norm: shapes " + x.describe() + ", " + w.describe());
  do_rms_norm(x, w, eps, y);
}

void Backend::layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  for (const auto& [t, arg] : {std::pair{&x, "x"}, {&w, "weight"}, {&b, "bias"}, {&y, "y"}})
    require_f32(*t, "layer_norm", arg);
  const int64_t d = last_dim(x);
  if (!(w.numel() == d && b.numel() == d && y.numel() == x.numel())) fail("layer_norm: shapes " + x.describe());
  do_layer_norm(x, w, b, eps, y);
}

void Backend::rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, float scale) {
  require_f32(x, "rope", "x");
  if (!(x.rank() == 3)) fail("rope: x must be [tokens, heads, head_dim], got " + x.describe());
  if (!(static_cast<int64_t>(positions.size()) == x.dim(0)))
    fail("rope: " + std::to_string(positions.size()) + " positions for " + std::to_string(x.dim(0)) + " tokens");
  check_rope_frequencies("rope", inv_freq, x.dim(2));
  do_rope(x, positions, inv_freq, scale);
}

void Backend::silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  require_f32("silu_mul", {&gate, &up, &out});
  require_same_size("silu_mul", {&gate, &up, &out});
  do_silu_mul(gate, up, out);
}

void Backend::gelu_mul(const Tensor& gate, const Tensor& up, Gelu form, Tensor& out) {
  require_f32("gelu_mul", {&gate, &up, &out});
  require_same_size("gelu_mul", {&gate, &up, &out});
  do_gelu_mul(gate, up, form, out);
}

void Backend::gelu(const Tensor& x, Gelu form, Tensor& out) {
  require_f32(x, "gelu", "x");
  require_f32(out, "gelu", "out");
  if (!(out.numel() == x.numel())) fail("gelu: shapes " + x.describe() + " and " + out.describe() + " differ");
  do_gelu(x, form, out);
}

void Backend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  for (const auto& [t, arg] : {std::pair{&a, "a"}, {&b, "b"}, {&out, "out"}}) require_f32(*t, "add", arg);
  if (!(a.numel() == b.numel() && out.numel() == a.numel()))
    fail("add: shapes " + a.describe() + " and " + b.describe() + " differ");
  do_add(a, b, out);
}

void Backend::softmax(Tensor& x) {
  require_f32(x, "softmax", "x");
  do_softmax(x);
}

void Backend::kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> positions, const KvPages& cache) {
  require_f32(k, "kv_write", "k");
  require_f32(v, "kv_write", "v");
  if (!(k.rank() == 4 && v.shape() == k.shape())) fail("kv_write: k " + k.describe() + ", v " + v.describe());
  check_kv("kv_write", cache, k.dim(2), k.dim(3));
  if (!(cache.batch == k.dim(0)))
    fail("kv_write: k " + k.describe() + " for a cache of " + std::to_string(cache.batch) + " sequences");
  if (!(static_cast<int64_t>(positions.size()) == k.dim(0) * k.dim(1))) fail("kv_write: positions do not match tokens");
  if (auto problem = kv_writes_problem(cache, positions); !problem.empty()) fail("kv_write: " + problem);
  do_kv_write(k, v, positions, cache);
}

void Backend::rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                            std::span<const float> inv_freq, const KvPages& cache) {
  require_f32("rope_kv_write", {&q, &k, &v});
  if (!(q.rank() == 3 && k.rank() == 3 && v.shape() == k.shape()))
    fail("rope_kv_write: q " + q.describe() + ", k " + k.describe() + ", v " + v.describe());
  const int64_t m = q.dim(0), hd = q.dim(2), b = cache.batch;
  check_kv("rope_kv_write", cache, k.dim(1), hd);
  if (!(k.dim(0) == m && k.dim(2) == hd && b > 0 && m % b == 0))
    fail("rope_kv_write: k " + k.describe() + " does not fit q " + q.describe() + " and a cache of " +
         std::to_string(b) + " sequences");
  if (!(static_cast<int64_t>(positions.size()) == m))
    fail("rope_kv_write: " + std::to_string(positions.size()) + " positions for " + std::to_string(m) + " tokens");
  check_rope_frequencies("rope_kv_write", inv_freq, hd);
  if (auto problem = kv_writes_problem(cache, positions); !problem.empty()) fail("rope_kv_write: " + problem);
  do_rope_kv_write(q, k, v, positions, inv_freq, cache);
}

void Backend::attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                        const AttentionSpec& spec, Tensor& out) {
  require_f32(q, "attention", "q");
  require_f32(out, "attention", "out");
  if (!(q.rank() == 4)) fail("attention: q " + q.describe());
  const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2);
  const int64_t hkv = cache.k.rank() == 4 ? cache.k.dim(2) : 0;
  check_kv("attention", cache, hkv, q.dim(3));
  if (!(cache.batch == b && hkv > 0 && hq % hkv == 0))
    fail("attention: q " + q.describe() + " does not fit a cache of " + std::to_string(cache.batch) + " sequences of " +
         std::to_string(hkv) + " KV heads");
  if (!(out.numel() == q.numel())) fail("attention: output " + out.describe() + " does not match q " + q.describe());
  if (!(static_cast<int64_t>(positions.size()) == b * t))
    fail("attention: " + std::to_string(positions.size()) + " positions for " + std::to_string(b * t) + " tokens");
  check_spec("attention", spec, hq);
  if (auto problem = kv_reads_problem(cache, positions, b, t, spec); !problem.empty()) fail("attention: " + problem);
  do_attention(q, cache, positions, spec, out);
}

void Backend::embed(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out) {
  if (!(table.rank() == 2 && supports_weight(table.dtype()))) fail("embed: unsupported table " + table.describe());
  if (table.device() != device())
    fail("embed: table " + table.describe() + " is on the " + device_name(table.device()) +
         " (upload it to this backend first)");
  require_f32(out, "embed", "out");
  const int64_t vocab = table.dim(0), d = table.dim(1);
  if (!(out.numel() == static_cast<int64_t>(ids.size()) * d))
    fail("embed: output " + out.describe() + " is not [" + std::to_string(ids.size()) + ", " + std::to_string(d) + "]");
  for (int32_t id : ids)
    if (!(id >= 0 && id < vocab))
      fail("embed: token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(vocab));
  do_embed(table, ids, scale, out);
}

void Backend::gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) {
  // f32 rows, or the rows of a KV pool in another dtype this backend keeps caches in (copy-on-write of its pages).
  if (!(x.dtype() == out.dtype() && supports_kv(x.dtype())))
    fail("gather_rows: x " + x.describe() + " and out " + out.describe() + " are not two f32 (or KV pool) tensors");
  const int64_t m = x.rows(), r = static_cast<int64_t>(rows.size());
  if (!(out.numel() == r * last_dim(x)))
    fail("gather_rows: output " + out.describe() + " for " + std::to_string(r) + " rows");
  for (int32_t i : rows)
    if (!(i >= 0 && i < m)) fail("gather_rows: row " + std::to_string(i) + " outside " + x.describe());
  do_gather_rows(x, rows, out);
}

void Backend::scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale,
                               Tensor& out) {
  require_f32(x, "scatter_add_rows", "x");
  require_f32(out, "scatter_add_rows", "out");
  const int64_t m = out.rows(), r = static_cast<int64_t>(rows.size());
  if (!(x.numel() == r * last_dim(out) && scale.size() == rows.size()))
    fail("scatter_add_rows: " + x.describe() + " for " + std::to_string(r) + " rows of " + out.describe());
  for (int32_t i : rows)
    if (!(i >= 0 && i < m)) fail("scatter_add_rows: row " + std::to_string(i) + " outside " + out.describe());
  do_scatter_add_rows(x, rows, scale, out);
}

// --- gradients ----------------------------------------------------------------------------------------------------

void Backend::matmul_backward(const Tensor& dy, const Tensor& w, Tensor& dx) {
  require_f32(dy, "matmul_backward", "dy");
  require_f32(dx, "matmul_backward", "dx");
  if (!(w.rank() == 2 && supports_weight(w.dtype()))) fail("matmul_backward: unsupported weight " + w.describe());
  if (w.device() != device())
    fail("matmul_backward: weight " + w.describe() + " is on the " + device_name(w.device()) +
         " (upload it to this backend first)");
  const int64_t n = w.dim(0), k = w.dim(1), m = dy.rows();
  if (!(dy.rank() >= 1 && dy.dim(-1) == n))
    fail("matmul_backward: dy " + dy.describe() + " does not match weight " + w.describe());
  if (!(dx.rank() >= 1 && dx.rows() == m && dx.dim(-1) == k))
    fail("matmul_backward: dx " + dx.describe() + " is not [" + std::to_string(m) + ", " + std::to_string(k) + "]");
  do_matmul_backward(dy, w, dx);
}

void Backend::matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw) {
  for (const auto& [t, arg] : {std::pair{&dy, "dy"}, {&x, "x"}, {&dw, "dw"}})
    require_f32(*t, "matmul_weight_grad", arg);
  const int64_t m = dy.rows(), n = last_dim(dy), k = last_dim(x);
  if (!(x.rows() == m && dw.rank() == 2 && dw.dim(0) == n && dw.dim(1) == k))
    fail("matmul_weight_grad: dy " + dy.describe() + ", x " + x.describe() + " and dw " + dw.describe() +
         " do not fit");
  do_matmul_weight_grad(dy, x, dw);
}

namespace {
// What a norm's backward requires of x [M, D], its weight [D] and the gradients dy, dx shaped like x (the f32
// checks done by the caller).
void check_norm_backward(const char* op, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx) {
  if (!(w.numel() == last_dim(x) && dy.numel() == x.numel() && dx.numel() == x.numel()))
    fail(std::string(op) + ": shapes " + x.describe() + ", " + w.describe() + ", " + dy.describe());
}
}  // namespace

void Backend::rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) {
  for (const auto& [t, arg] : {std::pair{&x, "x"}, {&w, "weight"}, {&dy, "dy"}, {&dx, "dx"}})
    require_f32(*t, "rms_norm_backward", arg);
  check_norm_backward("rms_norm_backward", x, w, dy, dx);
  do_rms_norm_backward(x, w, eps, dy, dx);
}

void Backend::layer_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) {
  for (const auto& [t, arg] : {std::pair{&x, "x"}, {&w, "weight"}, {&dy, "dy"}, {&dx, "dx"}})
    require_f32(*t, "layer_norm_backward", arg);
  check_norm_backward("layer_norm_backward", x, w, dy, dx);
  do_layer_norm_backward(x, w, eps, dy, dx);
}

void Backend::gelu_backward(const Tensor& x, Gelu form, const Tensor& d_out, Tensor& dx) {
  require_f32("gelu_backward", {&x, &d_out, &dx});
  require_same_size("gelu_backward", {&x, &d_out, &dx});
  do_gelu_backward(x, form, d_out, dx);
}

void Backend::silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& d_out, Tensor& d_gate,
                                Tensor& d_up) {
  require_f32("silu_mul_backward", {&gate, &up, &d_out, &d_gate, &d_up});
  require_same_size("silu_mul_backward", {&gate, &up, &d_out, &d_gate, &d_up});
  do_silu_mul_backward(gate, up, d_out, d_gate, d_up);
}

void Backend::gelu_mul_backward(const Tensor& gate, const Tensor& up, Gelu form, const Tensor& d_out, Tensor& d_gate,
                                Tensor& d_up) {
  require_f32("gelu_mul_backward", {&gate, &up, &d_out, &d_gate, &d_up});
  require_same_size("gelu_mul_backward", {&gate, &up, &d_out, &d_gate, &d_up});
  do_gelu_mul_backward(gate, up, form, d_out, d_gate, d_up);
}

void Backend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                                 const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv) {
  require_f32("attention_backward", {&q, &k, &v, &d_out, &dq, &dk, &dv});
  if (!(q.rank() == 4 && k.rank() == 4 && v.shape() == k.shape()))
    fail("attention_backward: q " + q.describe() + ", k " + k.describe() + ", v " + v.describe());
  if (!(k.dim(0) == q.dim(0) && k.dim(1) == q.dim(1) && k.dim(3) == q.dim(3) && k.dim(2) > 0 &&
        q.dim(2) % k.dim(2) == 0))
    fail("attention_backward: k " + k.describe() + " does not fit q " + q.describe());
  if (!(d_out.numel() == q.numel() && dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel()))
    fail("attention_backward: gradient shapes do not match q " + q.describe() + " and k " + k.describe());
  check_spec("attention_backward", spec, q.dim(2));
  do_attention_backward(q, k, v, d_out, spec, dq, dk, dv);
}

}  // namespace corolla
