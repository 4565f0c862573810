// End-to-end CPU engine figures on a TinyLlama-1.1B-shaped model (make_bench_model), each against its bound
// measured in the same run:
//   decode   tokens/s vs the read-bandwidth bound (bandwidth / weight bytes read per token; of a mixture of experts,
//            make_bench_model --experts=8, the bytes of the experts the router chooses)
//   prefill  GFLOP/s of a 512-token prompt through the blocks vs oneDNN's own matmul running the same matmuls
//            (every block's seven, in turn), alternated with it
//   memory   peak RSS during decode vs weights + KV cache
//
//   bench_decode --model=DIR [--threads=2] [--tokens=32] [--rounds=5] [--prefill=512] [--context=1024]
//                [--dtype=q4_K]   (weights converted to this dtype on loading, as `corolla serve --dtype` does)
//   (decode: `tokens` warm-up steps, then rounds x tokens measured ones; prefill: `rounds` alternations, none
//   with --prefill=0)
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "bench/bench_util.hpp"
#include "bench/library_block_matmuls.hpp"
#include "model/local_model.hpp"

using namespace corolla;
using namespace corolla::bench;

namespace {

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = arg(argc, argv, "model", "");
  if (dir.empty()) {
    std::fprintf(stderr, "usage: bench_decode --model=DIR (write one with make_bench_model --out=DIR)\n");
    return 2;
  }
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const int tokens = std::stoi(arg(argc, argv, "tokens", "32"));
  const int prefill = std::stoi(arg(argc, argv, "prefill", "512"));
  const int64_t context = std::stoll(arg(argc, argv, "context", "1024"));
  const int rounds = std::max(1, std::stoi(arg(argc, argv, "rounds", "5")));
  const std::string dtype_arg = arg(argc, argv, "dtype", "");
  std::optional<DType> dtype;
  if (!dtype_arg.empty() && !(dtype = parse_dtype(dtype_arg))) {
    std::fprintf(stderr, "bench_decode: unknown --dtype %s\n", dtype_arg.c_str());
    return 2;
  }

  auto backend = make_cpu_backend(threads);
  auto source = open_weights(dir);
  const double load_t0 = wall_s();
  LocalModel model(source, *backend, dtype);
  const double load_s = wall_s() - load_t0;
  const ModelConfig& c = model.config();
  auto pool = ThreadPool::shared(threads);

  // Bytes one decode step reads: every block's weights, the LM head, one embedding row. Of a mixture of experts
  // only the router's choice: experts_per_token of num_experts experts per block (the active parameters).
  const Tensor lm_head_w = source->get("lm_head.weight");
  const double lm_head = static_cast<double>(storage_bytes(dtype.value_or(lm_head_w.dtype()), lm_head_w.numel()));
  const double block_bytes = static_cast<double>(model.weight_bytes());
  double idle_experts = 0;
  if (c.num_experts > 0) {
    double expert = 0;
    for (const char* w : {"w1", "w2", "w3"})
      expert += static_cast<double>(
          source->get(std::string("model.layers.0.block_sparse_moe.experts.0.") + w + ".weight").nbytes());
    idle_experts = expert * static_cast<double>((c.num_experts - c.experts_per_token) * c.num_layers);
  }
  const double per_token = block_bytes - idle_experts + lm_head + static_cast<double>(c.hidden_size) * 2;
  const double kv_bytes =
      static_cast<double>(kv_bytes_per_token(c)) * static_cast<double>(c.num_layers) * static_cast<double>(context);

  std::printf("bench_decode: %s%s%s, %lld blocks, %d threads, %s, load average %s; loaded in %.1f s\n", dir.c_str(),
              dtype ? " as " : "", dtype ? dtype_arg.c_str() : "", static_cast<long long>(c.num_layers), threads,
              backend->name().c_str(), load_average().c_str(), load_s);

  // Decode: a short prompt, `tokens` warm-up steps, then `rounds` x `tokens` steps, each paired with a plain read
  // sweep over a buffer as large as the bytes a step reads, run right after it. The sweep's time is the bound of
  // that step (bandwidth / bytes per token), and the two saw the machine in the same state: this VM's bandwidth
  // moves by +-15 % within seconds, so a sweep taken seconds apart from the steps it judges says little. The figure
  // is the median of the per-step ratios.
  model.reset(1, context);
  std::vector<int32_t> prompt = {1, 450, 7483, 310, 3444, 338};
  std::vector<int32_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  model.forward(prompt, pos, true);
  int32_t next_pos = static_cast<int32_t>(prompt.size());
  auto step = [&] {
    const int32_t id = 100 + next_pos;
    const double t0 = wall_s();
    model.forward({&id, 1}, {&next_pos, 1}, true);
    ++next_pos;
    return wall_s() - t0;
  };
  for (int i = 0; i < tokens && next_pos < context; ++i) step();
  const double rss = peak_rss_bytes();  // before the sweep's buffer
  const size_t sweep_bytes = static_cast<size_t>(per_token) / 4096 * 4096;
  auto sweep_buf = aligned_buffer(sweep_bytes);
  const SweepWidth width = best_sweep_width(*pool, sweep_buf.get(), sweep_bytes);
  struct Pair {
    double step_s, sweep_s;
    double ratio() const { return sweep_s / step_s; }
  };
  std::vector<Pair> pairs;
  volatile uint64_t sink = 0;
  for (int i = 0; i < rounds * tokens && next_pos < context; ++i) {
    const double step_s = step();
    const double t0 = wall_s();
    sink = sink + read_sweep(*pool, sweep_buf.get(), sweep_bytes, width);
    pairs.push_back({step_s, wall_s() - t0});
  }
  sweep_buf.reset();
  auto p10_p50_p90 = [&](auto key) {
    std::vector<double> v;
    for (const Pair& p : pairs) v.push_back(key(p));
    std::sort(v.begin(), v.end());
    return std::array<double, 3>{v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10]};
  };
  const auto ratio = p10_p50_p90([](const Pair& p) { return p.ratio(); });
  const auto tok_s = p10_p50_p90([](const Pair& p) { return 1.0 / p.step_s; });
  const auto gbs = p10_p50_p90([&](const Pair& p) { return static_cast<double>(sweep_bytes) / p.sweep_s / 1e9; });
  std::printf("decode : %.2f tokens/s (median of %zu steps, p10..p90 %.2f..%.2f); %.2f GB read per token\n", tok_s[1],
              pairs.size(), tok_s[0], tok_s[2], per_token / 1e9);
  if (c.num_experts > 0)
    std::printf(
        "         (active parameters: %lld of %lld experts per block; all of the blocks' weights are %.2f GB)\n",
        static_cast<long long>(c.experts_per_token), static_cast<long long>(c.num_experts), block_bytes / 1e9);
  std::printf("         read bandwidth %.1f GB/s (%s sweep after each step, p10..p90 %.1f..%.1f)\n", gbs[1],
              sweep_name(width), gbs[0], gbs[2]);
  std::printf("         step time / its sweep's time -> ratio %.3f (median; p10..p90 %.3f..%.3f)\n", ratio[1], ratio[0],
              ratio[2]);
  std::printf("memory : peak RSS %.2f GB; weights %.2f GB + KV cache %.3f GB -> ratio %.3f\n", rss / 1e9,
              (block_bytes + 2 * lm_head) / 1e9, kv_bytes / 1e9, rss / (block_bytes + 2 * lm_head + kv_bytes));

  // Prefill: one prompt of `prefill` tokens through the blocks (fresh cache) against the library's matmuls alone,
  // alternated for `rounds` rounds; each side's best round counts (disturbances only ever slow a run down). Both
  // sides are whole runs of the same work, so the best round of one is judged against the best of the other.
  // --prefill=0 measures decode only.
  if (prefill <= 0) return 0;
  if (c.num_experts > 0) {  // the library side would be dense matmuls: no like-for-like reference
    std::printf("prefill: not measured for a mixture of experts\n");
    return 0;
  }
  std::vector<int32_t> long_prompt(static_cast<size_t>(prefill));
  for (int i = 0; i < prefill; ++i) long_prompt[static_cast<size_t>(i)] = 3 + (i * 7919) % 31000;
  std::vector<int32_t> long_pos(long_prompt.size());
  std::iota(long_pos.begin(), long_pos.end(), 0);
  LibraryBlockMatmuls library(c, prefill, threads);
  double t_prefill = 1e300, t_lib = 1e300, t_composite = 1e300;
  for (int r = 0; r < rounds; ++r) {
    t_prefill = std::min(t_prefill, best_time(1, [&] {
                           model.reset(1, prefill);
                           model.forward(long_prompt, long_pos, true);
                         }));
    t_lib = std::min(t_lib, library.sequence_seconds(static_cast<int>(c.num_layers)));
    t_composite = std::min(t_composite, library.composite_seconds(static_cast<int>(c.num_layers)));
  }
  const double d = static_cast<double>(c.hidden_size), kv = static_cast<double>(c.num_kv_heads * c.head_dim);
  const double matmul_params =  // the seven matrices of every block, whatever their dtype
      (2 * d * d + 2 * d * kv + 3 * d * static_cast<double>(c.intermediate_size)) * static_cast<double>(c.num_layers);
  const double matmul_flops = 2.0 * static_cast<double>(prefill) * matmul_params;
  std::printf(
      "prefill: %d tokens in %.2f s -> %.1f GFLOP/s (matmuls); oneDNN f32 alone, the same matmuls in a "
      "prefill's order, %.1f GFLOP/s -> ratio %.3f (best of %d rounds each)\n",
      prefill, t_prefill, matmul_flops / t_prefill / 1e9, matmul_flops / t_lib / 1e9, t_lib / t_prefill, rounds);
  std::printf("         (against each matmul's best of 3, summed: %.1f GFLOP/s -> ratio %.3f)\n",
              matmul_flops / t_composite / 1e9, t_composite / t_prefill);
  return 0;
}
