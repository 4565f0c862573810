#include "actors/balance/block_selection.hpp"

#include <algorithm>
#include <stdexcept>

namespace corolla {

std::vector<double> block_throughputs(const std::vector<server_info>& servers, int64_t total_blocks) {
  std::vector<double> out(static_cast<size_t>(std::max<int64_t>(total_blocks, 0)), 0.0);
  for (const auto& s : servers) {
    const double rate = s.throughput > 0 ? s.throughput : 1.0;
    for (int64_t b = std::max<int64_t>(0, s.first_block); b < std::min(s.last_block, total_blocks); ++b)
      out[static_cast<size_t>(b)] += rate;
  }
  return out;
}

int64_t choose_first_block(const std::vector<double>& throughputs, int64_t num_blocks) {
  const auto total = static_cast<int64_t>(throughputs.size());
  if (num_blocks < 1 || num_blocks > total)
    throw std::invalid_argument("cannot host " + std::to_string(num_blocks) + " blocks of a model with " +
                                std::to_string(total));
  int64_t best = 0;
  std::vector<double> best_key;
  for (int64_t start = 0; start + num_blocks <= total; ++start) {
    std::vector<double> key(throughputs.begin() + start, throughputs.begin() + start + num_blocks);
    std::sort(key.begin(), key.end());
    if (start == 0 || key < best_key) {
      best = start;
      best_key = std::move(key);
    }
  }
  return best;
}

int64_t rechoose_first_block(std::vector<double> others, int64_t num_blocks, int64_t current_first, double rate) {
  const auto total = static_cast<int64_t>(others.size());
  if (current_first < 0 || current_first + num_blocks > total)
    throw std::invalid_argument("blocks " + std::to_string(current_first) + ":" +
                                std::to_string(current_first + num_blocks) + " are not a span of a model with " +
                                std::to_string(total));
  constexpr double kStay = 1e-3;  // as rebalance.cpp's eps: well below any real difference in strength
  for (int64_t b = current_first; b < current_first + num_blocks; ++b)
    others[static_cast<size_t>(b)] -= (rate > 0 ? rate : 1.0) * kStay;
  return choose_first_block(others, num_blocks);
}

}  // namespace corolla
