// The simulator's compute: a Backend whose operations do no arithmetic. Each one accounts the time it would take
// on the modelled device (a roofline: the larger of its arithmetic at `flops` and its memory traffic at
// `bytes_per_second`, plus a fixed launch overhead), and reports the sum through ModelledTime; the block actor
// then lets that time pass before it replies. Tensors it allocates are virtual (sim/virtual_tensor.hpp): weights
// and KV caches of any size cost no memory.
//
// With `digests`, outputs are also checkable: each operation writes, in every row of its output, values drawn
// from a hash of what the row depends on (its input rows; a token's position for RoPE; for attention, the
// digests of the keys and values its query attends to, which kv_write keeps per cache slot), so a model's output
// is a deterministic function of its inputs, batch- and chunk-independent like the real computation, and a
// replay that misses a step, repeats one or uses a wrong position gives other tokens. Activations up to
// kDigestRowsBytes are then real memory (larger ones, and weights, stay virtual and carry no digest).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "kernels/backend.hpp"
#include "kernels/modelled_time.hpp"
#include "sim/virtual_tensor.hpp"

namespace corolla::sim {

struct DeviceModel {
  double flops = 100e12;           // sustained arithmetic, FLOP/s
  double bytes_per_second = 1e12;  // sustained memory bandwidth
  double op_overhead_s = 5e-6;     // per operation (kernel launch, framework)
};

class CostBackend final : public Backend, public ModelledTime {
 public:
  explicit CostBackend(DeviceModel device, bool digests = false) : device_(device), digests_(digests) {}

  std::string name() const override { return "sim-cost"; }
  Device device() const override { return Device::cpu; }
  bool supports_weight(DType) const override { return true; }

  Tensor alloc(DType dtype, Shape shape) override;
  // KV pools: virtual whatever their size (digests keep a slot's key and value apart from them).
  Tensor alloc_reserve(DType dtype, Shape shape) override;
  // A tensor on the modelled device: virtual, as everything this backend computes on (weights stay as they are:
  // they are virtual already, or small). A copy from the host is charged.
  Tensor upload(const Tensor& host) override;
  // Another virtual tensor: the cost model's operations never write, so a copy needs no memory.
  Tensor copy(const Tensor& t) override;
  Tensor download(const Tensor& t) override { return t; }
  // A batch's input and a chunked prompt's output: real where they carry digests (as alloc()), else virtual host
  // tensors (which upload() charges a copy for, as it does real ones); rows are copied only into tensors with
  // storage.
  Tensor alloc_host(DType dtype, Shape shape) override;
  void copy_host_rows(const Tensor& src, int64_t src_row, Tensor& dst, int64_t dst_row, int64_t rows) override;
  ModelledTime* modelled_time() override { return this; }

  std::chrono::nanoseconds take_modelled_time() override;
  const DeviceModel& model() const { return device_; }
  bool digests() const { return digests_; }

  static constexpr int64_t kDigestRowsBytes = int64_t{16} << 20;

 protected:
  void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override;
  void do_rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override;
  void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) override;
  void do_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, float scale) override;
  void do_silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void do_gelu_mul(const Tensor& gate, const Tensor& up, Gelu form, Tensor& out) override;
  void do_gelu(const Tensor& x, Gelu form, Tensor& out) override;
  void do_add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void do_softmax(Tensor& x) override;
  void do_kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> positions, const KvPages& cache) override;
  void do_attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                    const AttentionSpec& spec, Tensor& out) override;
  void do_embed(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out) override;
  void do_gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) override;
  void do_scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale,
                           Tensor& out) override;
  void do_matmul_backward(const Tensor& dy, const Tensor& w, Tensor& dx) override;
  void do_matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw) override;
  void do_rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) override;
  void do_layer_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) override;
  void do_gelu_backward(const Tensor& x, Gelu form, const Tensor& d_out, Tensor& dx) override;
  void do_silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& d_out, Tensor& d_gate,
                            Tensor& d_up) override;
  void do_gelu_mul_backward(const Tensor& gate, const Tensor& up, Gelu form, const Tensor& d_out, Tensor& d_gate,
                            Tensor& d_up) override;
  void do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                             const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv) override;

 private:
  // Real zeroed memory where a tensor carries digests (f32 activations up to kDigestRowsBytes), else a virtual one
  // in `space`.
  Tensor alloc_in(VirtualSpace space, DType dtype, Shape shape);
  // One operation of `flop` arithmetic moving `bytes`.
  void account(double flop, double bytes);
  void account_matmul(int64_t m, int64_t n, int64_t k, DType weight_dtype);

  DeviceModel device_;
  double pending_s_ = 0;
  bool digests_ = false;
  // The digest of each cache slot's key and value: (the pool's address, its row) -> digest.
  std::map<std::pair<const void*, int64_t>, uint64_t> slot_digests_;
};

std::shared_ptr<CostBackend> make_cost_backend(DeviceModel device, bool digests = false);

}  // namespace corolla::sim
