#include "actors/client/batch_spread.hpp"

#include <algorithm>
#include <stdexcept>

namespace corolla {

batch_plan spread_batch(const std::vector<server_info>& servers, int64_t first, int64_t last, int64_t rows,
                        int64_t tokens_per_row, int64_t max_rows, const std::set<std::string>& excluded,
                        const std::map<std::string, double>& penalty,
                        const std::map<std::string, double>& client_rtt_ms) {
  if (rows < 1 || tokens_per_row < 1 || max_rows < 1)
    throw std::invalid_argument("spread_batch: rows (" + std::to_string(rows) + "), tokens_per_row (" +
                                std::to_string(tokens_per_row) + ") and max_rows (" + std::to_string(max_rows) +
                                ") must be at least 1");
  batch_plan out;
  if (auto gap = find_gap(servers, first, last, excluded)) {
    out.error = *gap;
    return out;
  }
  std::map<std::string, double> busy_until;  // per server: when it has finished the sub-batches it holds
  chain_costs costs;
  costs.entry = [&](const server_info& s) {
    auto it = penalty.find(s.address);
    return it == penalty.end() ? 0.0 : std::max(0.0, it->second);
  };
  costs.ready = [&](const server_info& s) {
    auto it = busy_until.find(s.address);
    return it == busy_until.end() ? 0.0 : it->second;
  };
  costs.client_rtt_ms = client_rtt_ms;
  // Equal sub-batches (their sizes differ by at most one row), so no small remainder is left to the end.
  const int64_t parts = (rows + max_rows - 1) / max_rows;
  for (int64_t p = 0, begin = 0; p < parts; ++p) {
    const int64_t size = rows / parts + (p < rows % parts ? 1 : 0);
    const double tokens = static_cast<double>(size * tokens_per_row);
    costs.per_block = [tokens](const server_info& s) {
      const double rps = s.forward_rps > 0 ? s.forward_rps : s.throughput > 0 ? s.throughput : kDefaultForwardRps;
      return tokens / rps;
    };
    route_plan chain = fastest_chain(servers, first, last, excluded, costs);
    if (!chain.ok()) {
      out.error = chain.error;
      out.parts.clear();
      return out;
    }
    for (size_t h = 0; h < chain.hops.size(); ++h) {
      double& until = busy_until[chain.hops[h].address];
      until = std::max(until, chain.hop_done[h]);
    }
    out.parts.push_back({begin, begin + size, std::move(chain.hops), chain.seconds});
    out.seconds = std::max(out.seconds, chain.seconds);
    begin += size;
  }
  return out;
}

}  // namespace corolla
