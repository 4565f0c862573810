// Batched decode on the CPU engine: B sessions decoding together through a model's blocks (Block::forward_batch,
// as a server runs the steps of concurrent sessions) and the LM head (one product for the B rows, as the client's
// head batcher runs it), for several B in the same run, rounds alternated. For each B:
//   tokens/s      B tokens per step
//   memory bound  the step's time against one read of the weights it uses (a read sweep of as many bytes, run right
//                 after the step: this VM's bandwidth moves within seconds)
//   compute bound the step's time against oneDNN's f32 matmuls of the same shapes at M = B (every block's seven and
//                 the LM head, run right after the step)
// A step is memory-bound while its time is near the sweep's and compute-bound when near the library's.
//
//   bench_batch_decode --model=DIR [--threads=2] [--sessions=1,8,32] [--steps=4] [--rounds=3] [--prompt=32]
//                      [--dtype=q8_0]   (weights converted on loading, as `corolla serve --dtype` does)
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/library_block_matmuls.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "model/block.hpp"
#include "model/client_head.hpp"

using namespace corolla;
using namespace corolla::bench;

namespace {

// B sessions of one sequence each, every one with its KV cache in every block, prefilled with `prompt` tokens.
struct Sessions {
  int64_t b;
  std::vector<std::vector<KVCache>> caches;  // [block][session]
  std::vector<int32_t> positions;            // each session's next position
  Sessions(std::vector<std::unique_ptr<Block>>& blocks, Backend& be, int64_t b, int64_t prompt, int64_t context,
           int64_t d)
      : b(b), caches(blocks.size()), positions(static_cast<size_t>(b), static_cast<int32_t>(prompt)) {
    std::vector<int32_t> pos(static_cast<size_t>(prompt));
    std::iota(pos.begin(), pos.end(), 0);
    for (size_t l = 0; l < blocks.size(); ++l)
      for (int64_t s = 0; s < b; ++s) caches[l].push_back(blocks[l]->make_cache(1, context));
    for (int64_t s = 0; s < b; ++s) {
      Tensor h = Tensor::empty(DType::f32, {1, prompt, d});
      fill_random(h.data_as<float>(), h.numel(), static_cast<uint64_t>(s + 1));
      h = be.upload(h);
      for (size_t l = 0; l < blocks.size(); ++l) blocks[l]->forward(h, pos, &caches[l][static_cast<size_t>(s)]);
    }
  }
  // One decode step of every session: their B rows through every block, then the head.
  void step(std::vector<std::unique_ptr<Block>>& blocks, const ClientHead& head, Backend& be, int64_t d) {
    Tensor h = Tensor::empty(DType::f32, {b, d});
    fill_random(h.data_as<float>(), h.numel(), static_cast<uint64_t>(positions[0]));
    h = be.upload(h);
    std::vector<std::vector<int32_t>> at(static_cast<size_t>(b));
    std::vector<BlockSegment> segments;
    for (int64_t s = 0; s < b; ++s) at[static_cast<size_t>(s)] = {positions[static_cast<size_t>(s)]};
    for (size_t l = 0; l < blocks.size(); ++l) {
      segments.clear();
      for (int64_t s = 0; s < b; ++s)
        segments.push_back({.row = s,
                            .batch = 1,
                            .tokens = 1,
                            .positions = at[static_cast<size_t>(s)],
                            .cache = &caches[l][static_cast<size_t>(s)]});
      blocks[l]->forward_batch(h, segments);
    }
    (void)head.logits(h);
    for (auto& p : positions) ++p;
  }
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // oneDNN's OpenMP threads would otherwise spin for a while after each library run, on the cores the next step
  // needs.
  setenv("OMP_WAIT_POLICY", "passive", 0);
  const std::string dir = arg(argc, argv, "model", "");
  if (dir.empty()) {
    std::fprintf(stderr, "usage: bench_batch_decode --model=DIR (write one with make_bench_model --out=DIR)\n");
    return 2;
  }
  const int threads = std::stoi(arg(argc, argv, "threads", "2"));
  const std::vector<int64_t> sizes = parse_list(arg(argc, argv, "sessions", "1,8,32"));
  const int steps = std::max(1, std::stoi(arg(argc, argv, "steps", "4")));
  const int rounds = std::max(1, std::stoi(arg(argc, argv, "rounds", "3")));
  const int64_t prompt = std::stoll(arg(argc, argv, "prompt", "32"));
  const std::string dtype_arg = arg(argc, argv, "dtype", "");
  std::optional<DType> dtype;
  if (!dtype_arg.empty() && !(dtype = parse_dtype(dtype_arg))) {
    std::fprintf(stderr, "bench_batch_decode: unknown --dtype %s\n", dtype_arg.c_str());
    return 2;
  }

  auto backend = make_cpu_backend(threads);
  auto pool = ThreadPool::shared(threads);
  auto source = open_weights(dir);
  const ModelConfig& c = source->config();
  std::vector<std::unique_ptr<Block>> blocks;
  double weight_bytes = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    blocks.push_back(load_block(*source, l, *backend, {dtype}));
    weight_bytes += static_cast<double>(blocks.back()->weight_bytes());
  }
  const ClientHead head(*source, *backend, dtype);
  weight_bytes += static_cast<double>(head.lm_head_weight().nbytes());
  const int64_t d = c.hidden_size;
  const int64_t context = prompt + static_cast<int64_t>(steps) * rounds + 1;

  std::printf("bench_batch_decode: %s%s%s, %lld blocks, %d threads, load average %s; %.0f MB of weights a step\n\n",
              dir.c_str(), dtype ? " as " : "", dtype ? dtype_arg.c_str() : "", static_cast<long long>(c.num_layers),
              threads, load_average().c_str(), weight_bytes / 1e6);

  std::vector<Sessions> sessions;
  std::vector<std::unique_ptr<LibraryBlockMatmuls>> library;
  std::vector<std::unique_ptr<DnnlMatmul>> library_head;
  std::vector<std::vector<float>> head_buffers;
  std::vector<float> head_w(static_cast<size_t>(c.vocab_size * d), 0.01f);
  for (int64_t b : sizes) {
    sessions.emplace_back(blocks, *backend, b, prompt, context, d);
    library.push_back(std::make_unique<LibraryBlockMatmuls>(c, b, threads));
    float* x = head_buffers.emplace_back(static_cast<size_t>(b * d), 0.5f).data();
    float* y = head_buffers.emplace_back(static_cast<size_t>(b * c.vocab_size)).data();
    library_head.push_back(std::make_unique<DnnlMatmul>(b, c.vocab_size, d, false, true, head_w.data(), x, y, threads));
  }
  head_w.clear();
  head_w.shrink_to_fit();
  const size_t sweep_bytes = static_cast<size_t>(weight_bytes) / 4096 * 4096;
  auto sweep_buf = aligned_buffer(sweep_bytes);
  const SweepWidth width = best_sweep_width(*pool, sweep_buf.get(), sweep_bytes);

  // Per size: each step's time, and its ratios to the sweep and to the library run right after it.
  std::vector<std::vector<double>> step_s(sizes.size()), memory(sizes.size()), compute(sizes.size());
  std::vector<double> bandwidth;
  volatile uint64_t sink = 0;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < sizes.size(); ++i)
      for (int s = 0; s < steps; ++s) {
        double t0 = wall_s();
        sessions[i].step(blocks, head, *backend, d);
        const double t = wall_s() - t0;
        t0 = wall_s();
        sink = sink + read_sweep(*pool, sweep_buf.get(), sweep_bytes, width);
        const double sweep = wall_s() - t0;
        t0 = wall_s();
        library[i]->sequence_seconds(static_cast<int>(c.num_layers));
        library_head[i]->run();
        const double lib = wall_s() - t0;
        step_s[i].push_back(t);
        bandwidth.push_back(static_cast<double>(sweep_bytes) / sweep);
        memory[i].push_back(sweep / t);
        compute[i].push_back(lib / t);
      }
  (void)sink;

  std::printf(
      "| sessions B | ms per step | tokens/s | vs B = 1 | of the memory bound | of the compute bound |\n"
      "|---|---|---|---|---|---|\n");
  const double base = sizes.empty() ? 1 : static_cast<double>(sizes[0]) / median(step_s[0]);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double ms = median(step_s[i]) * 1e3;
    const double tps = static_cast<double>(sizes[i]) / median(step_s[i]);
    std::printf("| %lld | %.1f | %.1f | %.2f× | %.2f | %.2f |\n", static_cast<long long>(sizes[i]), ms, tps, tps / base,
                median(memory[i]), median(compute[i]));
  }
  std::printf(
      "\n(%d rounds of %d steps per size, alternated; medians; read bandwidth %.1f GB/s (%s sweep); "
      "load average now %s)\n",
      rounds, steps, median(bandwidth) / 1e9, sweep_name(width), load_average().c_str());
  return 0;
}
