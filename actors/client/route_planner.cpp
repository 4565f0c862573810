#include "actors/client/route_planner.hpp"

namespace corolla {

route_plan plan_route(const std::vector<server_info>& servers, int64_t first, int64_t last,
                      const std::set<std::string>& excluded, int64_t min_cache_tokens) {
  route_plan plan;
  int64_t at = first;
  while (at < last) {
    const server_info* best = nullptr;
    for (const auto& s : servers) {
      if (excluded.count(s.address) || s.first_block > at || s.last_block <= at) continue;
      if (s.cache_tokens_left < min_cache_tokens) continue;
      if (!best || s.last_block > best->last_block ||
          (s.last_block == best->last_block &&
           (s.cache_tokens_left > best->cache_tokens_left ||
            (s.cache_tokens_left == best->cache_tokens_left && s.throughput > best->throughput))))
        best = &s;
    }
    if (!best) {
      // Say how far the gap reaches: up to the first block some server does cover again.
      int64_t gap_end = last;
      for (const auto& s : servers)
        if (!excluded.count(s.address) && s.first_block > at && s.first_block < gap_end) gap_end = s.first_block;
      plan.hops.clear();
      plan.error = "no server for blocks " + std::to_string(at) + ".." + std::to_string(gap_end - 1);
      return plan;
    }
    const int64_t end = std::min(best->last_block, last);
    plan.hops.push_back({best->address, at, end});
    at = end;
  }
  return plan;
}

}  // namespace corolla
