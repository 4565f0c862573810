// The CUDA backend: device memory, one stream per backend, cuBLAS for prefill GEMMs, custom kernels for the rest.
//
// Matmul paths (activations are always f32 in memory, outputs f32):
// - m ≤ 4 rows (decode): gpu::matvec reads the weights as stored (f32, f16, bf16, q8_0, q4_0, q4_1), converts
//   them in registers and accumulates in f32 with f32 activations: the CPU backend's arithmetic.
// - m > 4 rows (prefill): cuBLAS GemmEx with f32 accumulation (CUBLAS_COMPUTE_32F, no TF32). f32 weights: full
//   f32 GEMM. f16/bf16 weights, used as stored on the tensor cores: activations split into hi + lo of the weight
//   type and two GEMMs summed, so activations keep about 16 (bf16) or 22 (f16) bits instead of 8 or 11 and the
//   result is within 1e-4 of the f32 arithmetic (rounding activations once cost 1e-2 on the golden logits).
//   Quantized weights: dequantized exactly to f32 one tile of rows at a time (kDequantTileBytes), f32 GEMM.
// COROLLA_CUDA_MATVEC=cublas sends m ≤ 4 to the cuBLAS path too (for comparisons).
//
// Host arrays (positions, inv_freq, token ids) reach the device through ArgRing, a pinned staging ring: no stream
// synchronisation per call, and an identical recent payload (the same positions in every layer) is reused.
//
// Recordings (Backend::record) are CUDA graphs captured from the stream: while one is captured, tensors come from
// the recording's arena (zeroed at the start of each replay, as alloc() zeroes), host arrays other than the
// positions become device constants of the recording, and frees are held back until the capture ends. One lock
// per backend orders the callers' threads, so no other caller's work lands in a capture.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/launch.hpp"

namespace corolla {
namespace gpu {

void throw_cuda_error(cudaError_t error, const char* what) {
  throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(error) + " (" +
                           cudaGetErrorString(error) + ")");
}

}  // namespace gpu

namespace {

using gpu::check;

// Rows of quantized weights dequantized to f16 per cuBLAS call.
constexpr size_t kDequantTileBytes = size_t{32} << 20;

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error in ") + what + ": " + cublasGetStatusString(status));
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// cuBLAS and the kernels index with 32-bit ints: what this backend cannot do beyond the contract.
void require_32_bit(const char* op, int64_t m, int64_t n, int64_t k) {
  require(m < (int64_t{1} << 31) && n < (int64_t{1} << 31) && k < (int64_t{1} << 31),
          std::string(op) + ": dimensions beyond 2^31 are not supported");
}

// Makes `device` current for the scope (CAF actors may run on any thread) and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0, device_ = 0;
};

// What device allocations need after the backend is gone: tensors keep it alive through their deleters.
struct StreamContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  bool async_alloc = false;  // stream-ordered allocator (cudaMallocAsync) available
  // Held by every operation, and through a whole capture (by its thread, which may take it again).
  mutable std::recursive_mutex lock;
  // While a recording is captured: frees are held in `deferred` (a cudaFreeAsync would be captured) and done
  // after the capture ends.
  mutable bool capturing = false;
  mutable std::vector<void*> deferred;

  ~StreamContext() {
    if (!stream) return;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    cudaSetDevice(previous);
  }

  void* allocate(size_t bytes) const {
    void* p = nullptr;
    if (async_alloc)
      check(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync");
    else
      check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  // Never throws (runs in deleters, possibly at exit when the runtime is gone).
  void release(void* p) const noexcept {
    if (!p) return;
    std::lock_guard guard(lock);
    if (capturing) {
      try {
        deferred.push_back(p);
        return;
      } catch (...) {  // out of host memory: freeing now is still better than leaking
      }
    }
    free_now(p);
  }
  void release_deferred() const noexcept {
    std::lock_guard guard(lock);
    for (void* p : deferred) free_now(p);
    deferred.clear();
  }

 private:
  void free_now(void* p) const noexcept {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    if (previous != device) cudaSetDevice(device);
    if (async_alloc)
      cudaFreeAsync(p, stream);  // ordered after all work queued so far on the stream
    else
      cudaFree(p);
    if (previous != device) cudaSetDevice(previous);
    cudaGetLastError();
  }
};

// A device buffer that grows on demand (matmul scratch).
class Scratch {
 public:
  explicit Scratch(const StreamContext& ctx) : ctx_(ctx) {}
  ~Scratch() { ctx_.release(data_); }
  void* get(size_t bytes) {
    if (bytes > capacity_) {
      ctx_.release(data_);
      data_ = nullptr;
      capacity_ = 0;
      data_ = ctx_.allocate(bytes);
      capacity_ = bytes;
    }
    return data_;
  }
  size_t capacity() const { return capacity_; }

 private:
  const StreamContext& ctx_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Host arrays to the device without a stream synchronisation per call: payloads are staged in pinned memory and
// copied asynchronously into a device ring. When the ring wraps it waits for the stream once, so no staged bytes
// are overwritten before their copy ran. The last few payloads are remembered and reused when identical.
class ArgRing {
 public:
  explicit ArgRing(const StreamContext& ctx) : ctx_(ctx) {}
  ~ArgRing() { free_buffers(); }

  const void* put(const void* src, size_t bytes) {
    if (bytes == 0) return nullptr;
    for (const Entry& e : recent_)
      if (e.bytes == bytes && std::memcmp(host_ + e.offset, src, bytes) == 0) return device_ + e.offset;
    const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
    if (need > capacity_) grow(std::max(need * 2, kInitialBytes));
    if (head_ + need > capacity_) {
      check(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize");
      head_ = 0;
      recent_ = {};
    }
    const size_t offset = head_;
    std::memcpy(host_ + offset, src, bytes);
    check(cudaMemcpyAsync(device_ + offset, host_ + offset, bytes, cudaMemcpyHostToDevice, ctx_.stream),
          "cudaMemcpyAsync (arguments)");
    recent_[next_++ % recent_.size()] = Entry{offset, bytes};
    head_ += need;
    return device_ + offset;
  }

 private:
  static constexpr size_t kAlign = 256, kInitialBytes = size_t{1} << 20;
  struct Entry {
    size_t offset = 0, bytes = 0;
  };

  void grow(size_t bytes) {
    check(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize");
    free_buffers();
    check(cudaMallocHost(&host_raw_, bytes), "cudaMallocHost");
    host_ = static_cast<char*>(host_raw_);
    check(cudaMalloc(&device_raw_, bytes), "cudaMalloc");
    device_ = static_cast<char*>(device_raw_);
    capacity_ = bytes;
    head_ = 0;
    recent_ = {};
  }
  void free_buffers() {
    if (host_raw_) cudaFreeHost(host_raw_);
    if (device_raw_) cudaFree(device_raw_);
    host_raw_ = device_raw_ = nullptr;
    host_ = device_ = nullptr;
    capacity_ = 0;
  }

  const StreamContext& ctx_;
  void* host_raw_ = nullptr;
  void* device_raw_ = nullptr;
  char* host_ = nullptr;
  char* device_ = nullptr;
  size_t capacity_ = 0, head_ = 0, next_ = 0;
  std::array<Entry, 8> recent_{};
};

// Operations of one backend, one caller at a time, on the backend's device.
class OpScope {
 public:
  explicit OpScope(const StreamContext& ctx) : guard_(ctx.lock), device_(ctx.device) {}

 private:
  std::unique_lock<std::recursive_mutex> guard_;
  DeviceScope device_;
};

// Device memory of one recording: `zeroed` chunks hold the tensors its operations allocate (zeroed at the start
// of every replay, as alloc() zeroes), `constants` the host arrays they passed (copied once, at recording).
struct RecordingMemory {
  struct Chunk {
    char* data = nullptr;
    size_t size = 0, used = 0;
  };
  static constexpr size_t kAlign = 256, kChunkBytes = size_t{1} << 20;
  int device = 0;
  std::vector<Chunk> zeroed;
  std::vector<void*> constants;

  explicit RecordingMemory(int d) : device(d) {}
  ~RecordingMemory() {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    cudaSetDevice(device);
    for (const Chunk& c : zeroed) cudaFree(c.data);
    for (void* p : constants) cudaFree(p);
    cudaSetDevice(previous);
    cudaGetLastError();
  }
  RecordingMemory(const RecordingMemory&) = delete;
  RecordingMemory& operator=(const RecordingMemory&) = delete;

  void* take(size_t bytes) {
    const size_t need = (bytes + kAlign - 1) / kAlign * kAlign;
    if (zeroed.empty() || zeroed.back().size - zeroed.back().used < need) {
      Chunk c;
      c.size = std::max(need, kChunkBytes);
      void* p = nullptr;
      check(cudaMalloc(&p, c.size), "cudaMalloc (recording)");
      c.data = static_cast<char*>(p);
      zeroed.push_back(c);
    }
    Chunk& c = zeroed.back();
    void* p = c.data + c.used;
    c.used += need;
    return p;
  }
  // Copied now, synchronously, on the legacy stream (the capturing stream is non-blocking, so this is no part
  // of the capture).
  const void* constant(const void* src, size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc (recording constant)");
    constants.push_back(p);
    check(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (recording constant)");
    return p;
  }
};

// What operations consult while a recording is captured.
struct Capture {
  RecordingMemory* memory = nullptr;
  const int32_t* positions_host = nullptr;  // the span the recorded operations were given
  size_t positions_bytes = 0;
  const int32_t* positions_dev = nullptr;
  // Positions a replay may take: [low, high), narrowed by the operations that index a cache with them.
  int64_t low = std::numeric_limits<int32_t>::min(), high = int64_t{std::numeric_limits<int32_t>::max()} + 1;
  bool reads(std::span<const int32_t> positions) const {
    return positions.data() == positions_host && positions.size_bytes() == positions_bytes;
  }
};

class CudaRecording final : public Recording {
 public:
  CudaRecording(std::shared_ptr<StreamContext> ctx, Shape shape, size_t count)
      : ctx_(std::move(ctx)), memory_(std::make_unique<RecordingMemory>(ctx_->device)), shape_(shape), count_(count) {
    bytes_ = static_cast<size_t>(storage_bytes(DType::f32, shape.numel()));
    void* p = nullptr;
    if (bytes_) {
      check(cudaMalloc(&p, bytes_), "cudaMalloc (recording io)");
      io_data_ = p;
    }
    if (count_) {
      check(cudaMallocHost(&p, count_ * sizeof(int32_t)), "cudaMallocHost (recording positions)");
      positions_host_ = static_cast<int32_t*>(p);
      check(cudaMalloc(&p, count_ * sizeof(int32_t)), "cudaMalloc (recording positions)");
      positions_dev_ = static_cast<int32_t*>(p);
    }
    check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaRecording() override {
    OpScope scope(*ctx_);
    cudaStreamSynchronize(ctx_->stream);  // no replay still reads what is freed here
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    if (done_) cudaEventDestroy(done_);
    if (io_data_) cudaFree(io_data_);
    if (positions_dev_) cudaFree(positions_dev_);
    if (positions_host_) cudaFreeHost(positions_host_);
    memory_.reset();
    cudaGetLastError();
  }

  // The tensor and positions the recorded operations are given.
  Tensor io() { return Tensor::view(io_data_, DType::f32, shape_, nullptr, Device::cuda); }
  std::span<const int32_t> positions() const { return {positions_host_, count_}; }
  Capture capture() {
    Capture c;
    c.memory = memory_.get();
    c.positions_host = positions_host_;
    c.positions_bytes = count_ * sizeof(int32_t);
    c.positions_dev = positions_dev_;
    return c;
  }

  // The captured graph as replays run it: the arena's chunks zeroed, the positions copied from the pinned host
  // array and `io` copied in before the captured nodes, `io` copied out after them (copies that each replay points
  // at its tensor). Keeps `captured` (replays re-point its copy nodes); false where it cannot be instantiated.
  bool instantiate(cudaGraph_t captured, const Capture& c, const Tensor& io) {
    low_ = c.low, high_ = c.high;
    std::vector<cudaGraphNode_t> roots, leaves;
    cudaError_t error = graph_ends(captured, roots, leaves);
    std::vector<cudaGraphNode_t> before;  // what runs before the captured nodes
    for (const RecordingMemory::Chunk& chunk : memory_->zeroed) {
      if (error != cudaSuccess || chunk.used == 0) continue;
      cudaMemsetParams p{};
      p.dst = chunk.data;
      p.value = 0;
      p.elementSize = 1;
      p.width = chunk.used;
      p.height = 1;
      before.emplace_back();
      error = cudaGraphAddMemsetNode(&before.back(), captured, nullptr, 0, &p);
    }
    if (error == cudaSuccess && count_) {
      before.emplace_back();
      error = cudaGraphAddMemcpyNode1D(&before.back(), captured, nullptr, 0, positions_dev_, positions_host_,
                                       count_ * sizeof(int32_t), cudaMemcpyHostToDevice);
    }
    if (error == cudaSuccess && bytes_) {
      error = cudaGraphAddMemcpyNode1D(&copy_in_, captured, nullptr, 0, io_data_, io.data(), bytes_,
                                       cudaMemcpyDeviceToDevice);
      before.push_back(copy_in_);
      if (error == cudaSuccess)
        error = cudaGraphAddMemcpyNode1D(&copy_out_, captured, leaves.data(), leaves.size(), io.data(), io_data_,
                                         bytes_, cudaMemcpyDeviceToDevice);
    }
    for (cudaGraphNode_t b : before)
      for (size_t r = 0; error == cudaSuccess && r < roots.size(); ++r)
        error = cudaGraphAddDependencies(captured, &b, &roots[r], nullptr, 1);
    if (error == cudaSuccess) error = cudaGraphInstantiate(&exec_, captured, 0);
    graph_ = captured;  // kept: updates of the instantiated copy name its nodes
    if (error != cudaSuccess) {
      exec_ = nullptr;
      cudaGetLastError();
      return false;
    }
    io_target_ = io.data();
    return true;
  }

  void replay(Tensor& io, std::span<const int32_t> positions) override {
    if (io.dtype() != DType::f32 || io.device() != Device::cuda || io.shape() != shape_)
      throw std::invalid_argument("replay: " + io.describe() + " is not the recorded CUDA f32 " +
                                  Tensor::view(nullptr, DType::f32, shape_, nullptr, Device::cuda).describe());
    if (positions.size() != count_)
      throw std::invalid_argument("replay: " + std::to_string(positions.size()) + " positions, recorded with " +
                                  std::to_string(count_));
    for (int32_t p : positions)
      if (p < low_ || p >= high_)
        throw std::invalid_argument("replay: position " + std::to_string(p) + " outside the cache of " +
                                    std::to_string(high_) + " tokens");
    OpScope scope(*ctx_);
    if (bytes_ && io.data() != io_target_) {   // point the copies in and out at this tensor
      const bool own = io.data() == io_data_;  // the recording's own buffer: nothing to copy
      check(cudaGraphNodeSetEnabled(exec_, copy_in_, own ? 0 : 1), "cudaGraphNodeSetEnabled");
      check(cudaGraphNodeSetEnabled(exec_, copy_out_, own ? 0 : 1), "cudaGraphNodeSetEnabled");
      if (!own) {
        check(
            cudaGraphExecMemcpyNodeSetParams1D(exec_, copy_in_, io_data_, io.data(), bytes_, cudaMemcpyDeviceToDevice),
            "cudaGraphExecMemcpyNodeSetParams1D");
        check(
            cudaGraphExecMemcpyNodeSetParams1D(exec_, copy_out_, io.data(), io_data_, bytes_, cudaMemcpyDeviceToDevice),
            "cudaGraphExecMemcpyNodeSetParams1D");
      }
      io_target_ = io.data();
    }
    if (count_) {
      check(cudaEventSynchronize(done_), "cudaEventSynchronize");  // the last replay has read the positions
      std::memcpy(positions_host_, positions.data(), positions.size_bytes());
    }
    check(cudaGraphLaunch(exec_, ctx_->stream), "cudaGraphLaunch");
    check(cudaEventRecord(done_, ctx_->stream), "cudaEventRecord");
  }

 private:
  // The captured graph's first nodes (no dependencies) and last nodes (no dependents).
  static cudaError_t graph_ends(cudaGraph_t graph, std::vector<cudaGraphNode_t>& roots,
                                std::vector<cudaGraphNode_t>& leaves) {
    size_t n = 0;
    cudaError_t error = cudaGraphGetNodes(graph, nullptr, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    if (error == cudaSuccess && n) error = cudaGraphGetNodes(graph, nodes.data(), &n);
    for (size_t i = 0; error == cudaSuccess && i < n; ++i) {
      size_t in = 0, out = 0;
      error = cudaGraphNodeGetDependencies(nodes[i], nullptr, nullptr, &in);
      if (error == cudaSuccess) error = cudaGraphNodeGetDependentNodes(nodes[i], nullptr, nullptr, &out);
      if (in == 0) roots.push_back(nodes[i]);
      if (out == 0) leaves.push_back(nodes[i]);
    }
    return error;
  }

 private:
  std::shared_ptr<StreamContext> ctx_;
  std::unique_ptr<RecordingMemory> memory_;
  Shape shape_;
  size_t count_ = 0, bytes_ = 0;
  void* io_data_ = nullptr;
  int32_t* positions_host_ = nullptr;
  int32_t* positions_dev_ = nullptr;
  cudaEvent_t done_ = nullptr;
  cudaGraphNode_t copy_in_ = nullptr, copy_out_ = nullptr;
  const void* io_target_ = nullptr;  // the tensor the copies in and out point at
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int64_t low_ = 0, high_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : ctx_(std::make_shared<StreamContext>()) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw std::runtime_error("no CUDA GPU found");
    }
    if (device < 0 || device >= count)
      throw std::runtime_error("device cuda:" + std::to_string(device) + " does not exist (" + std::to_string(count) +
                               " CUDA GPU" + (count == 1 ? "" : "s") + " found)");
    ctx_->device = device;
    DeviceScope scope(device);
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    gpu_name_ = prop.name;
    sm_count_ = prop.multiProcessorCount;
    arch_ = prop.major * 10 + prop.minor;
    check(cudaStreamCreateWithFlags(&ctx_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    int pools = 0;
    cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device);
    if (pools) {
      // Keep freed memory in the pool instead of returning it at every synchronisation.
      cudaMemPool_t pool;
      check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
      uint64_t threshold = UINT64_MAX;
      check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
      ctx_->async_alloc = true;
    }
    check_blas(cublasCreate(&blas_), "cublasCreate");
    check_blas(cublasSetStream(blas_, ctx_->stream), "cublasSetStream");
    check_blas(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // no TF32
    // A workspace of our own, so that cuBLAS allocates nothing while a recording is captured.
    check(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes), "cudaMalloc (cuBLAS workspace)");
    check_blas(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes), "cublasSetWorkspace");
    const char* mode = std::getenv("COROLLA_CUDA_MATVEC");
    cublas_small_m_ = mode && std::string_view(mode) == "cublas";
    // Programmatic dependent launch needs sm_90 on every GPU the process computes on (the switch is process-wide).
    const char* pdl = std::getenv("COROLLA_CUDA_PDL");
    static std::once_flag first_gpu;
    std::call_once(first_gpu, [&] { gpu::programmatic_launch(arch_ >= 90 && !(pdl && std::string_view(pdl) == "0")); });
    if (arch_ < 90) gpu::programmatic_launch(false);
    activations_ = std::make_unique<Scratch>(*ctx_);
    tile_ = std::make_unique<Scratch>(*ctx_);
    partials_ = std::make_unique<Scratch>(*ctx_);
    counters_ = std::make_unique<Scratch>(*ctx_);
    args_ = std::make_unique<ArgRing>(*ctx_);
  }

  ~CudaBackend() override {
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(ctx_->device);
    cudaStreamSynchronize(ctx_->stream);
    args_.reset();
    tile_.reset();
    partials_.reset();
    counters_.reset();
    activations_.reset();
    if (blas_) cublasDestroy(blas_);
    if (blas_workspace_) cudaFree(blas_workspace_);
    cudaSetDevice(previous);
  }

  std::string name() const override {
    return "cuda:" + std::to_string(ctx_->device) + " (" + gpu_name_ + ", sm_" + std::to_string(arch_) +
           (cublas_small_m_ ? ", cuBLAS for decode" : "") +
           (gpu::programmatic_launch() ? ", programmatic dependent launch" : "") + ")";
  }
  Device device() const override { return Device::cuda; }
  // Not q5_0 / q5_1 nor the K-quants (256-value super-blocks): the CUDA kernels have no decoder for them. Such a
  // file loads with --dtype f16 / q8_0 (converted on the host), or is refused by load_matrix.
  bool supports_weight(DType t) const override {
    return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::q8_0 || t == DType::q4_0 ||
           t == DType::q4_1;
  }

  // --- memory ---------------------------------------------------------------------------------------------------
  Tensor alloc(DType dtype, Shape shape) override {
    OpScope scope(*ctx_);
    Tensor t = device_tensor(dtype, shape);
    if (t.nbytes() && !capture_)
      check(cudaMemsetAsync(t.data(), 0, static_cast<size_t>(t.nbytes()), ctx_->stream), "cudaMemset");
    return t;
  }

  Tensor upload(const Tensor& host) override {
    if (host.device() == Device::cuda) return host;
    OpScope scope(*ctx_);
    Tensor t = device_tensor(host.dtype(), host.shape());
    if (t.nbytes()) {
      check(
          cudaMemcpyAsync(t.data(), host.data(), static_cast<size_t>(t.nbytes()), cudaMemcpyHostToDevice, ctx_->stream),
          "cudaMemcpyAsync (upload)");
      check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize (upload)");  // the host may free it now
    }
    return t;
  }

  Tensor download(const Tensor& t) override {
    if (t.device() != Device::cuda) return t;
    OpScope scope(*ctx_);
    Tensor host = Tensor::empty(t.dtype(), t.shape());
    if (t.nbytes())
      check(
          cudaMemcpyAsync(host.data(), t.data(), static_cast<size_t>(t.nbytes()), cudaMemcpyDeviceToHost, ctx_->stream),
          "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize (download)");
    return host;
  }

  void synchronize() override {
    OpScope scope(*ctx_);
    check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize");
  }

  std::unique_ptr<Recording> record(const Tensor& io, std::span<const int32_t> positions,
                                    const RecordedOps& ops) override {
    if (io.dtype() != DType::f32 || io.device() != Device::cuda) return nullptr;
    OpScope scope(*ctx_);
    if (capture_) return nullptr;  // one capture at a time (ops recording ops)
    auto recording = std::make_unique<CudaRecording>(ctx_, io.shape(), positions.size());
    std::memcpy(const_cast<int32_t*>(recording->positions().data()), positions.data(), positions.size_bytes());
    Capture capture = recording->capture();
    Tensor inout = recording->io();
    check(cudaStreamSynchronize(ctx_->stream), "cudaStreamSynchronize");  // the capture starts from an idle stream
    check(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    capture_ = &capture;
    ctx_->capturing = true;
    bool ok = true;
    try {
      ops(inout, recording->positions());
      ok = inout.data() == recording->io().data() && inout.shape() == io.shape();  // transformed in place
    } catch (const std::exception&) {
      ok = false;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(ctx_->stream, &graph);
    capture_ = nullptr;
    ctx_->capturing = false;
    ctx_->release_deferred();
    cudaGetLastError();  // an operation the capture refused leaves its error behind
    if (!ok || ended != cudaSuccess || !graph) {
      if (graph) cudaGraphDestroy(graph);
      return nullptr;
    }
    if (!recording->instantiate(graph, capture, io)) return nullptr;
    return recording;
  }

 protected:
  // --- operations -----------------------------------------------------------------------------------------------
  void do_matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    project(x, w, bias, y, false);
  }

  void do_matmul_add(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) override {
    project(x, w, bias, y, true);
  }

  // Decode rows: the projections of one input in one matrix-vector launch where they share a dtype and width.
  void do_matmul_many(const Tensor& x, std::span<const Tensor* const> ws, std::span<const Tensor* const> biases,
                      std::span<Tensor* const> ys) override {
    const int64_t m = x.rows();
    bool one_launch = !ws.empty() && m >= 1 && m <= gpu::kMatvecMaxRows && !cublas_small_m_;
    for (size_t i = 0; one_launch && i < ws.size(); ++i)
      one_launch =
          ws[i]->dtype() == ws[0]->dtype() && ws[i]->rank() == 2 && ws[i]->dim(1) == ws[0]->dim(1) && ws[i]->dim(1) > 0;
    if (!one_launch) return Backend::do_matmul_many(x, ws, biases, ys);
    std::vector<gpu::MatvecOutput> outputs;
    for (size_t i = 0; i < ws.size(); ++i) {
      require_32_bit("matmul_many", m, ws[i]->dim(0), ws[i]->dim(1));
      outputs.push_back({ws[i]->data(), ys[i]->data_as<float>(), ws[i]->dim(0),
                         biases[i] ? biases[i]->data_as<const float>() : nullptr});
    }
    OpScope scope(*ctx_);
    gpu::matvec_many(ws[0]->dtype(), outputs, x.data_as<const float>(), m, ws[0]->dim(1), sm_count_, ctx_->stream);
  }

  void do_rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) override {
    const int64_t d = x.dim(-1), m = x.rows();
    OpScope scope(*ctx_);
    gpu::rms_norm(x.data_as<const float>(), w.data_as<const float>(), eps, y.data_as<float>(), m, d, ctx_->stream);
  }

  void do_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) override {
    const int64_t d = x.dim(-1), m = x.rows();
    OpScope scope(*ctx_);
    gpu::layer_norm(x.data_as<const float>(), w.data_as<const float>(), b.data_as<const float>(), eps,
                    y.data_as<float>(), m, d, ctx_->stream);
  }

  void do_rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, float scale) override {
    const int64_t n = x.dim(0), heads = x.dim(1), hd = x.dim(2), half = static_cast<int64_t>(inv_freq.size());
    OpScope scope(*ctx_);
    if (n == 0) return;
    const auto* pos = static_cast<const int32_t*>(put_args(positions.data(), positions.size_bytes()));
    const auto* freq = static_cast<const float*>(put_args(inv_freq.data(), inv_freq.size_bytes()));
    gpu::rope(x.data_as<float>(), n, heads, hd, half, scale, pos, freq, ctx_->stream);
  }

  void do_silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) override {
    OpScope scope(*ctx_);
    gpu::silu_mul(gate.data_as<const float>(), up.data_as<const float>(), out.data_as<float>(), out.numel(),
                  ctx_->stream);
  }

  void do_gelu_mul(const Tensor& gate, const Tensor& up, Gelu form, Tensor& out) override {
    OpScope scope(*ctx_);
    gpu::gelu_mul(gate.data_as<const float>(), up.data_as<const float>(), form, out.data_as<float>(), out.numel(),
                  ctx_->stream);
  }

  void do_gelu(const Tensor& x, Gelu form, Tensor& out) override {
    OpScope scope(*ctx_);
    gpu::gelu(x.data_as<const float>(), form, out.data_as<float>(), x.numel(), ctx_->stream);
  }

  void do_add(const Tensor& a, const Tensor& b, Tensor& out) override {
    OpScope scope(*ctx_);
    gpu::add(a.data_as<const float>(), b.data_as<const float>(), out.data_as<float>(), a.numel(), ctx_->stream);
  }

  void do_softmax(Tensor& x) override {
    OpScope scope(*ctx_);
    gpu::softmax(x.data_as<float>(), x.rows(), x.rank() == 0 ? 1 : x.dim(-1), ctx_->stream);
  }

  void do_kv_write(const Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                   const KvPages& cache) override {
    const int64_t b = k.dim(0), t = k.dim(1), row = k.dim(2) * k.dim(3);
    OpScope scope(*ctx_);
    if (b * t == 0) return;
    limit_positions(positions, cache);
    const auto* pos = static_cast<const int32_t*>(put_args(positions.data(), positions.size_bytes()));
    gpu::kv_write(k.data_as<const float>(), v.data_as<const float>(), pos, device_pages(cache), b, t, row,
                  ctx_->stream);
  }

  void do_rope_kv_write(Tensor& q, Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                        std::span<const float> inv_freq, const KvPages& cache) override {
    const int64_t m = q.dim(0), hq = q.dim(1), hd = q.dim(2), hkv = k.dim(1), b = cache.batch;
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    OpScope scope(*ctx_);
    if (m == 0 || hd == 0) return;
    limit_positions(positions, cache);
    const auto* pos = static_cast<const int32_t*>(put_args(positions.data(), positions.size_bytes()));
    const auto* freq = static_cast<const float*>(put_args(inv_freq.data(), inv_freq.size_bytes()));
    gpu::rope_kv_write(q.data_as<float>(), k.data_as<float>(), v.data_as<const float>(), b, m / b, hq, hkv, hd, half,
                       pos, freq, device_pages(cache), ctx_->stream);
  }

  void do_attention(const Tensor& q, const KvPages& cache, std::span<const int32_t> positions,
                    const AttentionSpec& spec, Tensor& out) override {
    const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), hd = q.dim(3), hkv = cache.k.dim(2);
    const int64_t slots = cache.slots();
    require(hd <= gpu::kAttentionMaxHeadDim, "attention: head_dim " + std::to_string(hd) + " above " +
                                                 std::to_string(gpu::kAttentionMaxHeadDim) +
                                                 " is not supported by the CUDA kernel");
    OpScope scope(*ctx_);
    if (b * t * hq == 0) return;
    limit_positions(positions, cache);
    const auto* pos = static_cast<const int32_t*>(put_args(positions.data(), positions.size_bytes()));
    const int splits = gpu::attention_splits(b * t * hq, slots, spec.window, sm_count_);
    float* partials = nullptr;
    int* counters = nullptr;
    if (splits > 1) {
      partials =
          static_cast<float*>(scratch(*partials_, static_cast<size_t>(b * t * hq * splits * (hd + 2)) * sizeof(float)));
      counters = static_cast<int*>(zeroed_scratch(*counters_, static_cast<size_t>(b * t * hq) * sizeof(int)));
    }
    gpu::attention(q.data_as<const float>(), device_pages(cache), pos, spec, out.data_as<float>(), b, t, hq, hkv, hd,
                   splits, partials, counters, ctx_->stream);
  }

  void do_gather_rows(const Tensor& x, std::span<const int32_t> rows, Tensor& out) override {
    const int64_t d = x.dim(-1), r = static_cast<int64_t>(rows.size());
    OpScope scope(*ctx_);
    if (r == 0) return;
    const auto* dev_rows = static_cast<const int32_t*>(put_args(rows.data(), rows.size_bytes()));
    gpu::gather_rows(x.data_as<const float>(), dev_rows, r, d, out.data_as<float>(), ctx_->stream);
  }

  void do_scatter_add_rows(const Tensor& x, std::span<const int32_t> rows, std::span<const float> scale,
                           Tensor& out) override {
    const int64_t d = out.dim(-1), r = static_cast<int64_t>(rows.size());
    OpScope scope(*ctx_);
    if (r == 0) return;
    const auto* dev_rows = static_cast<const int32_t*>(put_args(rows.data(), rows.size_bytes()));
    const auto* dev_scale = static_cast<const float*>(put_args(scale.data(), scale.size_bytes()));
    gpu::scatter_add_rows(x.data_as<const float>(), dev_rows, dev_scale, r, d, out.data_as<float>(), ctx_->stream);
  }

  void do_embed(const Tensor& table, std::span<const int32_t> ids, float scale, Tensor& out) override {
    const int64_t d = table.dim(1);
    OpScope scope(*ctx_);
    if (ids.empty() || d == 0) return;
    const auto* dev_ids = static_cast<const int32_t*>(put_args(ids.data(), ids.size_bytes()));
    gpu::embed(table.dtype(), table.data(), dev_ids, static_cast<int64_t>(ids.size()), d, scale, out.data_as<float>(),
               ctx_->stream);
  }

  // --- gradients ------------------------------------------------------------------------------------------------
  // dx = dy · w. Column-major view: dxᵀ (k × m) = W (k × n) · dyᵀ (n × m). f32 throughout: non-f32 weights are
  // converted to f32 one tile of rows at a time (gradients are not rounded to 16 bits).
  void do_matmul_backward(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    const int64_t n = w.dim(0), k = w.dim(1), m = dy.rows();
    require_32_bit("matmul_backward", m, n, k);
    OpScope scope(*ctx_);
    if (m == 0 || k == 0) return;
    float* pdx = dx.data_as<float>();
    if (n == 0) {
      check(cudaMemsetAsync(pdx, 0, static_cast<size_t>(m * k) * sizeof(float), ctx_->stream), "cudaMemset");
      return;
    }
    const float alpha = 1.f, zero = 0.f, one = 1.f;
    const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
    const float* pdy = dy.data_as<const float>();
    if (w.dtype() == DType::f32) {
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, ik, im, in, &alpha, w.data(), CUDA_R_32F, ik, pdy,
                              CUDA_R_32F, in, &zero, pdx, CUDA_R_32F, ik, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (matmul_backward)");
      return;
    }
    const int64_t tile_rows = std::max<int64_t>(1, std::min<int64_t>(n, kDequantTileBytes / (k * 4)));
    auto* tile = static_cast<float*>(scratch(*tile_, static_cast<size_t>(tile_rows * k) * 4));
    const int64_t row_bytes = storage_bytes(w.dtype(), k);
    for (int64_t r0 = 0; r0 < n; r0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, n - r0);
      gpu::dequantize_to_f32(w.dtype(), static_cast<const char*>(w.data()) + r0 * row_bytes, rows, k, tile,
                             ctx_->stream);
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_N, ik, im, static_cast<int>(rows), &alpha, tile, CUDA_R_32F,
                              ik, pdy + r0, CUDA_R_32F, in, r0 == 0 ? &zero : &one, pdx, CUDA_R_32F, ik,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (matmul_backward tile)");
    }
  }

  // dw += dyᵀ · x. Column-major view: dwᵀ (k × n) += xᵀ (k × m) · dy (m × n).
  void do_matmul_weight_grad(const Tensor& dy, const Tensor& x, Tensor& dw) override {
    const int64_t m = dy.rows(), n = dy.dim(-1), k = x.dim(-1);
    require_32_bit("matmul_weight_grad", m, n, k);
    OpScope scope(*ctx_);
    if (m == 0 || n == 0 || k == 0) return;
    const float alpha = 1.f, one = 1.f;
    check_blas(
        cublasGemmEx(blas_, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(k), static_cast<int>(n), static_cast<int>(m),
                     &alpha, x.data(), CUDA_R_32F, static_cast<int>(k), dy.data(), CUDA_R_32F, static_cast<int>(n),
                     &one, dw.data(), CUDA_R_32F, static_cast<int>(k), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (matmul_weight_grad)");
  }

  void do_rms_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) override {
    const int64_t d = x.dim(-1), m = x.rows();
    OpScope scope(*ctx_);
    gpu::rms_norm_backward(x.data_as<const float>(), w.data_as<const float>(), eps, dy.data_as<const float>(),
                           dx.data_as<float>(), m, d, ctx_->stream);
  }

  void do_layer_norm_backward(const Tensor& x, const Tensor& w, float eps, const Tensor& dy, Tensor& dx) override {
    const int64_t d = x.dim(-1), m = x.rows();
    OpScope scope(*ctx_);
    gpu::layer_norm_backward(x.data_as<const float>(), w.data_as<const float>(), eps, dy.data_as<const float>(),
                             dx.data_as<float>(), m, d, ctx_->stream);
  }

  void do_gelu_backward(const Tensor& x, Gelu form, const Tensor& d_out, Tensor& dx) override {
    OpScope scope(*ctx_);
    gpu::gelu_backward(x.data_as<const float>(), form, d_out.data_as<const float>(), dx.data_as<float>(), x.numel(),
                       ctx_->stream);
  }

  void do_silu_mul_backward(const Tensor& gate, const Tensor& up, const Tensor& d_out, Tensor& d_gate,
                            Tensor& d_up) override {
    OpScope scope(*ctx_);
    gpu::silu_mul_backward(gate.data_as<const float>(), up.data_as<const float>(), d_out.data_as<const float>(),
                           d_gate.data_as<float>(), d_up.data_as<float>(), gate.numel(), ctx_->stream);
  }

  void do_gelu_mul_backward(const Tensor& gate, const Tensor& up, Gelu form, const Tensor& d_out, Tensor& d_gate,
                            Tensor& d_up) override {
    OpScope scope(*ctx_);
    gpu::gelu_mul_backward(gate.data_as<const float>(), up.data_as<const float>(), form, d_out.data_as<const float>(),
                           d_gate.data_as<float>(), d_up.data_as<float>(), gate.numel(), ctx_->stream);
  }

  void do_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                             const AttentionSpec& spec, Tensor& dq, Tensor& dk, Tensor& dv) override {
    const int64_t b = q.dim(0), t = q.dim(1), hq = q.dim(2), hd = q.dim(3), hkv = k.dim(2);
    require(hd <= gpu::kAttentionMaxHeadDim, "attention_backward: head_dim " + std::to_string(hd) + " above " +
                                                 std::to_string(gpu::kAttentionMaxHeadDim) + " is not supported");
    OpScope scope(*ctx_);
    Tensor stats = device_tensor(DType::f32, {2, b * t * hq});
    float* lse = stats.data_as<float>();
    gpu::attention_backward(q.data_as<const float>(), k.data_as<const float>(), v.data_as<const float>(),
                            d_out.data_as<const float>(), spec, dq.data_as<float>(), dk.data_as<float>(),
                            dv.data_as<float>(), lse, lse + b * t * hq, b, t, hq, hkv, hd, ctx_->stream);
  }

 private:
  Tensor device_tensor(DType dtype, Shape shape) {
    const int64_t bytes = storage_bytes(dtype, shape.numel());
    if (bytes == 0) return Tensor::view(nullptr, dtype, shape, nullptr, Device::cuda);
    if (capture_)
      return Tensor::view(capture_->memory->take(static_cast<size_t>(bytes)), dtype, shape, nullptr, Device::cuda);
    void* p = ctx_->allocate(static_cast<size_t>(bytes));
    std::shared_ptr<const StreamContext> ctx = ctx_;
    std::shared_ptr<const void> owner(p, [ctx](const void* q) { ctx->release(const_cast<void*>(q)); });
    return Tensor::view(p, dtype, shape, std::move(owner), Device::cuda);
  }

  // y[m, n] = x[m, k] · w[n, k]ᵀ through cuBLAS. Column-major view: yᵀ (n × m) = W (k × n)ᵀ · xᵀ (k × m).
  // y = x · wᵀ + beta · y (beta 0 or 1).
  void gemm(const float* x, const Tensor& w, float* y, int64_t m, int64_t n, int64_t k, float beta) {
    const float alpha = 1.f;
    const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
    const DType wt = w.dtype();
    if (wt == DType::f32) {
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w.data(), CUDA_R_32F, ik, x,
                              CUDA_R_32F, ik, &beta, y, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (f32)");
      return;
    }
    if (!is_quantized(wt)) {
      const cudaDataType_t ct = wt == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
      auto* hi = static_cast<char*>(scratch(*activations_, static_cast<size_t>(m * k) * 4));
      void* lo = hi + m * k * 2;
      gpu::split_activations(x, m * k, wt, hi, lo, ctx_->stream);
      const float one = 1.f;
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w.data(), ct, ik, hi, ct, ik, &beta,
                              y, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (16-bit, hi)");
      check_blas(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, in, im, ik, &alpha, w.data(), ct, ik, lo, ct, ik, &one,
                              y, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (16-bit, lo)");
      return;
    }
    const int64_t tile_rows = std::max<int64_t>(1, std::min<int64_t>(n, kDequantTileBytes / (k * 4)));
    auto* tile = static_cast<float*>(scratch(*tile_, static_cast<size_t>(tile_rows * k) * 4));
    const int64_t row_bytes = storage_bytes(wt, k);
    for (int64_t r0 = 0; r0 < n; r0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, n - r0);
      gpu::dequantize_to_f32(wt, static_cast<const char*>(w.data()) + r0 * row_bytes, rows, k, tile, ctx_->stream);
      check_blas(
          cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), im, ik, &alpha, tile, CUDA_R_32F, ik, x,
                       CUDA_R_32F, ik, &beta, y + r0, CUDA_R_32F, in, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (dequantized tile)");
    }
  }

  // y = x · wᵀ (+ bias), or y += that with `accumulate`.
  void project(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, bool accumulate) {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.rows();
    require_32_bit("matmul", m, n, k);
    OpScope scope(*ctx_);
    if (m == 0 || n == 0) return;
    float* py = y.data_as<float>();
    const float* pb = bias ? bias->data_as<const float>() : nullptr;
    if (m <= gpu::kMatvecMaxRows && !cublas_small_m_ && k > 0) {
      const gpu::MatvecOutput out{w.data(), py, n, pb, accumulate};
      gpu::matvec_many(w.dtype(), std::span<const gpu::MatvecOutput>(&out, 1), x.data_as<const float>(), m, k,
                       sm_count_, ctx_->stream);
      return;
    }
    if (k == 0) {
      if (!accumulate)
        check(cudaMemsetAsync(py, 0, static_cast<size_t>(m * n) * sizeof(float), ctx_->stream), "cudaMemset");
    } else {
      gemm(x.data_as<const float>(), w, py, m, n, k, accumulate ? 1.f : 0.f);
    }
    if (pb) gpu::add_bias(py, pb, m, n, ctx_->stream);
  }

  // A host array on the device: the recording's positions or constants while one is captured, else through the ring.
  const void* put_args(const void* src, size_t bytes) {
    if (!capture_) return args_->put(src, bytes);
    if (bytes == 0) return nullptr;
    if (capture_->reads({static_cast<const int32_t*>(src), bytes / sizeof(int32_t)}) && bytes % sizeof(int32_t) == 0)
      return capture_->positions_dev;
    return capture_->memory->constant(src, bytes);
  }
  // The recording's arena while one is captured (a Scratch that grew would free memory the graph reads).
  void* scratch(Scratch& s, size_t bytes) { return capture_ ? capture_->memory->take(bytes) : s.get(bytes); }
  // Scratch that is zero when handed out (the kernels that use it leave it zero): zeroed when it grows.
  void* zeroed_scratch(Scratch& s, size_t bytes) {
    if (capture_) return capture_->memory->take(bytes);  // zeroed at the start of each replay
    const size_t before = s.capacity();
    void* p = s.get(bytes);
    if (s.capacity() != before) check(cudaMemsetAsync(p, 0, s.capacity(), ctx_->stream), "cudaMemsetAsync");
    return p;
  }
  // An operation that indexes a cache of `slots` with the recorded positions bounds what a replay may pass.
  // The checked cache with its page table on the device (under an OpScope: the table goes through the argument
  // ring, and into a recording as one of its constants).
  gpu::DevicePages device_pages(const KvPages& cache) {
    gpu::DevicePages d;
    d.k = cache.k.data_as<float>();
    d.v = cache.v.data_as<float>();
    d.table = static_cast<const int32_t*>(put_args(cache.table.data(), cache.table.size_bytes()));
    d.page_tokens = static_cast<uint32_t>(cache.page_tokens());
    d.pages_per_sequence = static_cast<uint32_t>(cache.pages_per_sequence());
    return d;
  }

  // A recording's replays may move its positions only within what the cache takes (any position of a ring).
  void limit_positions(std::span<const int32_t> positions, const KvPages& cache) {
    if (!capture_ || !capture_->reads(positions)) return;
    capture_->low = 0;
    if (!cache.ring) capture_->high = std::min(capture_->high, cache.slots());
  }

  std::shared_ptr<StreamContext> ctx_;
  Capture* capture_ = nullptr;  // while a recording is captured (under ctx_->lock)
  cublasHandle_t blas_ = nullptr;
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;  // what cuBLAS asks for on Hopper
  void* blas_workspace_ = nullptr;
  std::unique_ptr<Scratch> activations_, tile_, partials_, counters_;  // attention's split parts and their counts
  std::unique_ptr<ArgRing> args_;
  std::string gpu_name_;
  int sm_count_ = 1, arch_ = 0;
  bool cublas_small_m_ = false;
};

}  // namespace

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error state so later CUDA calls start clean
    return false;
  }
  return count > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) { return std::make_unique<CudaBackend>(device_index); }

}  // namespace corolla
