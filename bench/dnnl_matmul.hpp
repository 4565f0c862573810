// oneDNN's own matmul at a shape, for benchmarks that compare Corolla's GEMM path with the library alone.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

extern "C" void omp_set_num_threads(int);

namespace corolla::bench {

// One oneDNN matmul for a shape: src [M, K] (f32 or bf16), weights [K, N] viewed over our [N, K] rows, dst f32.
struct DnnlMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
  dnnl::memory src_f32;  // the f32 activations, reordered to bf16 on every call when the matmul is bf16
  dnnl::reorder to_bf16;
  bool bf16 = false;

  int threads;

  DnnlMatmul(int64_t m, int64_t n, int64_t k, bool use_bf16, bool packed, void* w, float* x, float* y, int nthr)
      : bf16(use_bf16), threads(nthr) {
    omp_set_num_threads(threads);  // cpu_matmul sets this thread to one OpenMP thread; oneDNN alone gets all
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt t = use_bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src_md({m, k}, t, tag::ab);
    const dnnl::memory::desc wei_stored({k, n}, t, tag::ba);
    const dnnl::memory::desc wei_md = packed ? dnnl::memory::desc({k, n}, t, tag::any) : wei_stored;
    const dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), eng);
    prim = dnnl::matmul(pd);
    dnnl::memory stored(wei_stored, eng, w);
    if (pd.weights_desc() != wei_stored) {
      wei = dnnl::memory(pd.weights_desc(), eng);
      dnnl::reorder(stored, wei).execute(strm, stored, wei);
      strm.wait();
    } else {
      wei = stored;
    }
    dst = dnnl::memory(dst_md, eng, y);
    src_f32 = dnnl::memory(dnnl::memory::desc({m, k}, dt::f32, tag::ab), eng, x);
    if (use_bf16) {
      src = dnnl::memory(src_md, eng);
      to_bf16 = dnnl::reorder(src_f32, src);
    } else {
      src = src_f32;
    }
    omp_set_num_threads(1);
  }
  void run() {
    omp_set_num_threads(threads);
    if (bf16) to_bf16.execute(strm, src_f32, src);
    prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    strm.wait();
    omp_set_num_threads(1);
  }
};

}  // namespace corolla::bench
