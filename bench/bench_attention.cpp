// Attention over a paged KV cache on the CPU: one decode step's attention (by default TinyLlama's 32 query heads
// over 4 KV heads of 64; the demo model's are --heads=9 --kv_heads=3) and one prefill chunk's, over histories of
// several lengths held three ways, timed in alternation:
//   contiguous  one page per sequence (a local model's cache)
//   pages       64-token pages handed out in order (a server's session cache in a fresh pool: one run)
//   scattered   the same pages in shuffled pool order (a pool after much churn: a matrix product per page)
//   pages f16   the pages in order, keys and values held in f16 (kv_cache_dtype = "f16": half the bytes)
// and printed as the time per call and the ratios to the contiguous cache (the f16 pages' to the f32 pages').
//
//   bench_attention [--threads=2] [--contexts=512,2048,8192] [--sequences=8] [--reps=20] [--heads=32]
//                   [--kv_heads=4] [--head_dim=64]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/backend.hpp"

using namespace corolla;
using namespace corolla::bench;

namespace {

constexpr int64_t kPage = 64, kChunk = 64;

struct Heads {
  int64_t query, kv, dim;
};

struct Layout {
  const char* name;
  Tensor k, v;
  std::vector<int32_t> table;
  int64_t batch;
  KvPages pages() const { return {k, v, table, batch}; }
};

// `batch` sequences of `context` slots in pages of `page` tokens, the pool's pages in order or shuffled, held in
// `dtype`.
Layout layout(const char* name, Backend& be, const Heads& h, int64_t batch, int64_t context, int64_t page,
              bool shuffled, DType dtype = DType::f32) {
  const int64_t per_sequence = (context + page - 1) / page, pages = batch * per_sequence;
  Layout l{name, be.alloc(dtype, {pages, page, h.kv, h.dim}), be.alloc(dtype, {pages, page, h.kv, h.dim}),
           std::vector<int32_t>(static_cast<size_t>(pages)), batch};
  std::iota(l.table.begin(), l.table.end(), 0);
  if (shuffled) std::shuffle(l.table.begin(), l.table.end(), std::mt19937(7));
  std::vector<float> values(static_cast<size_t>(l.k.numel()));
  for (auto [pool, seed] : {std::pair{&l.k, 1u}, std::pair{&l.v, 2u}}) {
    fill_random(values.data(), pool->numel(), seed);
    from_f32(dtype, values.data(), pool->data(), pool->numel());
  }
  return l;
}

std::vector<int64_t> list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const int64_t batch = std::stoll(arg(argc, argv, "sequences", "8"));
  const int reps = std::stoi(arg(argc, argv, "reps", "20"));
  const Heads h{std::stoll(arg(argc, argv, "heads", "32")), std::stoll(arg(argc, argv, "kv_heads", "4")),
                std::stoll(arg(argc, argv, "head_dim", "64"))};
  auto be = make_cpu_backend(threads);
  std::printf(
      "attention over a paged KV cache, %lld sequences, %lld query heads over %lld KV heads of %lld, "
      "%d threads, load %s\n",
      static_cast<long long>(batch), static_cast<long long>(h.query), static_cast<long long>(h.kv),
      static_cast<long long>(h.dim), threads, load_average().c_str());
  std::printf("%-8s %-8s %12s %12s %12s %12s %8s %9s %9s\n", "context", "step", "contiguous", "pages", "scattered",
              "pages f16", "pages/c", "scatt./c", "f16/pages");
  for (const int64_t context : list(arg(argc, argv, "contexts", "512,2048,8192"))) {
    std::vector<Layout> layouts;
    layouts.push_back(layout("contiguous", *be, h, batch, context, context, false));
    layouts.push_back(layout("pages", *be, h, batch, context, kPage, false));
    layouts.push_back(layout("scattered", *be, h, batch, context, kPage, true));
    layouts.push_back(layout("pages f16", *be, h, batch, context, kPage, false, DType::f16));
    for (const int64_t t : {int64_t{1}, kChunk}) {
      // Every sequence's last t slots: a decode step (t = 1) or the last chunk of a prompt.
      std::vector<int32_t> positions(static_cast<size_t>(batch * t));
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < t; ++i)
          positions[static_cast<size_t>(b * t + i)] = static_cast<int32_t>(context - t + i);
      Tensor q = be->alloc(DType::f32, {batch, t, h.query, h.dim});
      fill_random(q.data_as<float>(), q.numel(), 3);
      Tensor out = be->alloc(DType::f32, {batch, t, h.query * h.dim});
      const AttentionSpec spec{.scale = 1.f / std::sqrt(static_cast<float>(h.dim))};
      std::vector<double> best(layouts.size(), 1e30);
      for (int r = 0; r < reps; ++r)  // rounds alternated, so that a slow minute of the VM hits all four
        for (size_t i = 0; i < layouts.size(); ++i)
          best[i] =
              std::min(best[i], best_time(1, [&] { be->attention(q, layouts[i].pages(), positions, spec, out); }));
      std::printf("%-8lld %-8s %10.3f ms %9.3f ms %9.3f ms %9.3f ms %8.2f %9.2f %9.2f\n",
                  static_cast<long long>(context), t == 1 ? "decode" : "chunk", best[0] * 1e3, best[1] * 1e3,
                  best[2] * 1e3, best[3] * 1e3, best[1] / best[0], best[2] / best[0], best[3] / best[1]);
    }
  }
  return 0;
}
