#include "kernels/cpu/gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/cpu/matvec.hpp"
#include "kernels/interleaved_rows.hpp"

extern "C" void omp_set_num_threads(int);

namespace corolla {
namespace {

// Rows of w packed per tile for oneDNN's packed-weights kernels: 128 rows of K = 2048 are 1 MB of f32, within a
// core's 2 MB L2. Also the grain of the work split.
constexpr int64_t kTileRows = 128;
// Bytes of f32 weights converted per call on the strided path (CPUs without AVX-512). There oneDNN's sgemm packs
// the whole activation matrix again on every call, so calls must be large: 8 MiB tiles (1024 rows of K = 2048)
// stay in L3 and cut that repacking 8-fold against 128-row tiles (prefill of 512 tokens 6 % faster on an AVX2
// EPYC, docs/PERFORMANCE.md).
constexpr int64_t kStridedTileBytes = int64_t{8} << 20;

// y[m, rows] (leading dimension ldy) = x[m, k] · w[rows, k]ᵀ with oneDNN on the calling thread only: OpenMP is set
// to one thread in every thread that calls it, so oneDNN never starts an OpenMP team (whose idle threads would
// spin on cores other servers share). Primitives are cached per thread and shape.
void onednn_sgemm(int64_t m, int64_t rows, int64_t k, const float* x, const float* w, float* y, int64_t ldy) {
  using dnnl::memory;
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  struct PerThread {
    PerThread() { omp_set_num_threads(1); }
    dnnl::stream stream{engine};
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>,
             std::tuple<dnnl::matmul, memory::desc, memory::desc, memory::desc>>
        prims;
  };
  thread_local PerThread t;
  auto key = std::make_tuple(m, rows, k, ldy);
  auto it = t.prims.find(key);
  if (it == t.prims.end()) {
    if (t.prims.size() >= 64) t.prims.clear();  // prefill lengths vary: keep the cache small
    const memory::desc src({m, k}, memory::data_type::f32, memory::dims{k, 1});
    const memory::desc wei({k, rows}, memory::data_type::f32, memory::dims{1, k});  // w's rows are columns
    const memory::desc dst({m, rows}, memory::data_type::f32, memory::dims{ldy, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), engine);
    it = t.prims.emplace(key, std::make_tuple(dnnl::matmul(pd), src, wei, dst)).first;
  }
  auto& [prim, src, wei, dst] = it->second;
  prim.execute(t.stream, {{DNNL_ARG_SRC, memory(src, engine, const_cast<float*>(x))},
                          {DNNL_ARG_WEIGHTS, memory(wei, engine, const_cast<float*>(w))},
                          {DNNL_ARG_DST, memory(dst, engine, y)}});
  t.stream.wait();
}

// A growable 64-byte aligned float buffer (a thread's packed weight tile).
class AlignedFloats {
 public:
  float* get(int64_t n) {
    if (n > cap_) {
      const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      cap_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t cap_ = 0;
};

// oneDNN's matmul on the calling thread for y[m, rows] (leading dimension ldy) = x[m, k] · wᵀ, with w's rows
// packed into panels (PackFn, matvec.hpp). oneDNN's fast matmul kernels (brgemm) want a dense output, so they
// write a per-thread [m, rows] buffer that is then copied out.
class PackedSgemm {
 public:
  // The primitive for a shape, created once per thread; null where oneDNN has no fast kernel for packed weights
  // (a CPU without AVX-512): the caller then takes the strided path.
  static PackedSgemm* for_shape(int64_t m, int64_t rows, int64_t k) {
    thread_local std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<PackedSgemm>> cache;
    auto key = std::make_tuple(m, rows, k);
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= 64) cache.clear();  // prefill lengths vary: keep the cache small
      omp_set_num_threads(1);                 // oneDNN computes in this thread only
      auto p = std::make_unique<PackedSgemm>(m, rows, k);
      if (!p->fast()) p.reset();
      it = cache.emplace(key, std::move(p)).first;
    }
    return it->second.get();
  }

  PackedSgemm(int64_t m, int64_t rows, int64_t k)
      : m_(m),
        rows_(rows),
        src_({m, k}, dt::f32, tag::ab),
        wei_({k, rows}, dt::f32, tag::BA16a64b),
        dst_({m, rows}, dt::f32, tag::ab),
        pd_(dnnl::matmul::desc(src_, wei_, dst_), engine()) {}

  bool fast() const { return std::string_view(pd_.impl_info_str()).find("ref") == std::string_view::npos; }

  void run(const float* x, const float* panels, float* y, int64_t ldy) {
    using dnnl::memory;
    thread_local dnnl::stream stream(engine());
    thread_local std::vector<float> out;
    out.resize(static_cast<size_t>(m_ * rows_));
    prim_.execute(stream, {{DNNL_ARG_SRC, memory(src_, engine(), const_cast<float*>(x))},
                           {DNNL_ARG_WEIGHTS, memory(wei_, engine(), const_cast<float*>(panels))},
                           {DNNL_ARG_DST, memory(dst_, engine(), out.data())}});
    stream.wait();
    for (int64_t i = 0; i < m_; ++i)
      std::memcpy(y + i * ldy, out.data() + i * rows_, static_cast<size_t>(rows_) * sizeof(float));
  }

 private:
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  static const dnnl::engine& engine() {
    static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
  }
  int64_t m_, rows_;
  dnnl::memory::desc src_, wei_, dst_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_{pd_};
};

// One weight of a matrix-vector job and where its output goes.
struct MatvecTarget {
  const Tensor* w;
  float* y;
};

// x prepared once for every prepare function among a job's kernels (matvec.hpp): the rows of x split over the pool
// when there are enough of them to share, in the caller otherwise. Kept per thread, reused from job to job.
class PreparedActivations {
 public:
  const char* get(ThreadPool& pool, const DTypeKernels& kd, const float* x, int64_t m, int64_t k) {
    for (const Entry& e : entries_)
      if (e.prepare == kd.prepare) return e.bytes;
    const int64_t group = kd.prepared_row_group, groups = (m + group - 1) / group;
    const int64_t group_bytes = kd.prepared_bytes_for(group, k);
    char* out = buffer(entries_.size(), kd.prepared_bytes_for(m, k));
    if (m < kRowsWorthSharing || groups < 2) {
      kd.prepare(x, m, k, out);
    } else {
      pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
        const int64_t i0 = g0 * group, i1 = std::min(m, g1 * group);
        kd.prepare(x + i0 * k, i1 - i0, k, out + g0 * group_bytes);
      });
    }
    entries_.push_back({kd.prepare, out});
    return out;
  }
  void clear() { entries_.clear(); }

 private:
  static constexpr int64_t kRowsWorthSharing = 8;
  struct Entry {
    PrepareFn prepare;
    const char* bytes;
  };
  char* buffer(size_t i, int64_t n) {
    if (buffers_.size() <= i) buffers_.resize(i + 1);
    return reinterpret_cast<char*>(buffers_[i].get(n / 4));  // n is a multiple of 64
  }
  std::vector<AlignedFloats> buffers_;
  std::vector<Entry> entries_;
};

// y_i = x · w_iᵀ with the matrix-vector kernels, the rows of all the weights split over the pool as one job; each
// thread reads its rows once for all m rows of x, and x is prepared once for kernels that read it prepared. Chunk
// bounds are multiples of 16 rows of the concatenation; a chunk that spans two weights runs a piece of each.
void matvec_job(ThreadPool& pool, const float* x, int64_t m, int64_t k, std::span<const MatvecTarget> targets) {
  std::vector<int64_t> first{0};  // first[i]: where weight i starts in the concatenation of all rows
  for (const MatvecTarget& t : targets) first.push_back(first.back() + t.w->dim(0));
  const MatvecKernels& kernels = best_matvec_kernels();
  thread_local PreparedActivations prepared;
  prepared.clear();
  std::vector<const char*> xp(targets.size(), nullptr);
  for (size_t i = 0; i < targets.size(); ++i)
    if (const DTypeKernels& kd = kernels.by_dtype[static_cast<size_t>(targets[i].w->dtype())];
        kd.prepared && m >= kd.prepared_min_rows)
      xp[i] = prepared.get(pool, kd, x, m, k);
  pool.parallel_for(first.back(), 16, [&](int64_t r0, int64_t r1) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t lo = std::max(r0, first[i]) - first[i], hi = std::min(r1, first[i + 1]) - first[i];
      if (lo >= hi) continue;
      const Tensor& w = *targets[i].w;
      if (xp[i])
        kernels.by_dtype[static_cast<size_t>(w.dtype())].prepared(w.data(), k, xp[i], m, targets[i].y, w.dim(0), lo,
                                                                  hi);
      else if (m == 1)
        kernels.for_dtype(w.dtype())(w.data(), k, x, targets[i].y, lo, hi);
      else
        kernels.rows_for_dtype(w.dtype())(w.data(), k, x, m, targets[i].y, w.dim(0), lo, hi);
    }
  });
}

}  // namespace

int64_t matvec_max_rows(DType weights) {
  switch (weights) {
    case DType::f32: return kMatvecMaxRowsF32;
    // bf16 on AMX tiles (the amx set prepares x for them) beats the GEMM at any number of rows.
    case DType::bf16:
      return best_matvec_kernels().by_dtype[static_cast<size_t>(DType::bf16)].prepared ? kMatvecAllRows
                                                                                       : kMatvecMaxRowsWide;
    case DType::f16: return kMatvecMaxRowsWide;
    case DType::q8_0: return kMatvecAllRows;
    case DType::q4_0:
    case DType::q5_0: return kMatvecAllRows;
    default: return is_interleaved(weights) ? kMatvecAllRows : kMatvecMaxRowsPacked;
  }
}

void cpu_matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  if (m <= matvec_max_rows(w.dtype())) {
    cpu_matvec_rows(pool, x, m, k, w, y);
  } else {
    cpu_gemm(pool, x, m, k, w, y);
  }
}

void cpu_matmul_many(ThreadPool& pool, const float* x, int64_t m, int64_t k, std::span<const Tensor* const> ws,
                     std::span<float* const> ys) {
  const bool all_matvec =
      std::all_of(ws.begin(), ws.end(), [&](const Tensor* w) { return m <= matvec_max_rows(w->dtype()); });
  if (!all_matvec) {
    for (size_t i = 0; i < ws.size(); ++i) cpu_matmul(pool, x, m, k, *ws[i], ys[i]);
    return;
  }
  std::vector<MatvecTarget> targets;
  for (size_t i = 0; i < ws.size(); ++i) targets.push_back({ws[i], ys[i]});
  matvec_job(pool, x, m, k, targets);
}

void cpu_matvec_rows(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y) {
  const MatvecTarget target{&w, y};
  matvec_job(pool, x, m, k, {&target, 1});
}

void cpu_gemm(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y, Sgemm strided) {
  const int64_t n = w.dim(0);
  const DType wt = w.dtype();

  const char* wdata = static_cast<const char*>(w.data());
  const Sgemm sgemm = strided ? strided : onednn_sgemm;
  const int64_t row_bytes = storage_bytes(wt, k);
  const bool interleaved = is_interleaved(wt);  // converted row by row, through the strided path
  const DequantFn dequant = interleaved ? nullptr : best_matvec_kernels().dequant_for_dtype(wt);
  const PackFn pack = interleaved ? nullptr : best_matvec_kernels().pack_for_dtype(wt);
  pool.parallel_for(n, kTileRows, [&](int64_t r0, int64_t r1) {
    if (!strided && !interleaved) {
      thread_local AlignedFloats panel;
      float* packed = panel.get(packed_floats(k, std::min(kTileRows, r1 - r0)));
      int64_t t0 = r0;
      for (PackedSgemm* mm; t0 < r1 && (mm = PackedSgemm::for_shape(m, std::min(kTileRows, r1 - t0), k));
           t0 += kTileRows) {
        pack(wdata + t0 * row_bytes, k, std::min(kTileRows, r1 - t0), packed);
        mm->run(x, packed, y + t0, n);
      }
      if (t0 >= r1) return;
      r0 = t0;  // no fast kernel for packed weights: the strided path below does the rest
    }
    if (wt == DType::f32) {
      sgemm(m, r1 - r0, k, x, reinterpret_cast<const float*>(wdata) + r0 * k, y + r0, n);
      return;
    }
    thread_local std::vector<float> tile;
    const int64_t tile_rows = std::max(kTileRows, kStridedTileBytes / (k * int64_t{sizeof(float)}));
    tile.resize(static_cast<size_t>(std::min(tile_rows, r1 - r0) * k));
    for (int64_t t0 = r0; t0 < r1; t0 += tile_rows) {
      const int64_t rows = std::min(tile_rows, r1 - t0);
      if (interleaved)
        for (int64_t r = 0; r < rows; ++r) interleaved_row_to_f32(wt, wdata, k, t0 + r, 0, k, tile.data() + r * k);
      else
        dequant(wdata + t0 * row_bytes, tile.data(), rows * k);
      sgemm(m, rows, k, x, tile.data(), y + t0, n);
    }
  });
}

}  // namespace corolla
