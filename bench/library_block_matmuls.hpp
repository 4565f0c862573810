// oneDNN running a block's matrix products: the library's rate at a shape, against which the engine's forward is
// judged (bench_decode's prefill, bench_batch_decode's batched decode).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/dnnl_matmul.hpp"
#include "model/config.hpp"

namespace corolla::bench {

// oneDNN's matmuls for a block's seven weights at M tokens, with f32 weights reordered once into its preferred
// layout (the library at its best; one block's weights serve every block).
class LibraryBlockMatmuls {
 public:
  LibraryBlockMatmuls(const ModelConfig& c, int64_t m, int threads) {
    const int64_t d = c.hidden_size, kv = c.num_kv_heads * c.head_dim, ff = c.intermediate_size;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{d, d}, {kv, d}, {kv, d}, {d, d}, {ff, d}, {ff, d}, {d, ff}}) {
      std::vector<float> w(static_cast<size_t>(n * k), 0.01f);  // reordered into the primitive's own memory
      Shape& s = shapes_.emplace_back(Shape{std::vector<float>(static_cast<size_t>(m * k), 0.5f),
                                            std::vector<float>(static_cast<size_t>(m * n)), nullptr});
      s.mm = std::make_unique<DnnlMatmul>(m, n, k, false, true, w.data(), s.x.data(), s.y.data(), threads);
      s.mm->run();
    }
  }
  // The matmuls of `blocks` blocks one after the other, as a forward runs them.
  double sequence_seconds(int blocks) {
    const double t0 = wall_s();
    for (int b = 0; b < blocks; ++b)
      for (Shape& s : shapes_) s.mm->run();
    return wall_s() - t0;
  }
  // Each matmul's best of three, summed over the block and multiplied by `blocks`: a composite that no run of a
  // prefill's length reaches on a noisy machine.
  double composite_seconds(int blocks) {
    double block = 0;
    for (Shape& s : shapes_) block += best_time(3, [&] { s.mm->run(); });
    return block * blocks;
  }

 private:
  struct Shape {
    std::vector<float> x, y;
    std::unique_ptr<DnnlMatmul> mm;
  };
  std::vector<Shape> shapes_;
};

}  // namespace corolla::bench
