#include "actors/client/route_planner.hpp"

#include <algorithm>
#include <limits>
#include <queue>

#include "actors/protocol/block_span.hpp"

namespace corolla {

std::optional<std::string> find_gap(const std::vector<server_info>& servers, int64_t first, int64_t last,
                                    const std::set<std::string>& excluded) {
  auto covers = [&](const server_info& s, int64_t b) {
    return !is_excluded(excluded, s) && s.first_block <= b && b < s.last_block;
  };
  int64_t at = first;
  for (; at < last; ++at)
    if (std::none_of(servers.begin(), servers.end(), [&](const server_info& s) { return covers(s, at); })) break;
  if (at >= last) return std::nullopt;
  int64_t gap_end = last;
  for (const auto& s : servers)
    if (!is_excluded(excluded, s) && s.first_block > at && s.first_block < gap_end) gap_end = s.first_block;
  return "no server for blocks " + block_span(at, gap_end);
}

route_plan fastest_chain(const std::vector<server_info>& servers, int64_t first, int64_t last,
                         const std::set<std::string>& excluded, const chain_costs& costs) {
  route_plan plan;
  if (first >= last) {
    plan.error = "an empty span of blocks " + block_span(first, last);
    return plan;
  }
  // The usable servers and their part [lo, hi) of [first, last); node ids: base[i] + (b - lo[i]), b in [lo, hi].
  std::vector<const server_info*> usable;
  for (const auto& s : servers)
    if (!is_excluded(excluded, s) && s.first_block < last && s.last_block > first && s.first_block < s.last_block)
      usable.push_back(&s);
  const size_t n = usable.size();
  std::vector<int64_t> lo(n), hi(n);
  std::vector<size_t> base(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    lo[i] = std::max(first, usable[i]->first_block);
    hi[i] = std::min(last, usable[i]->last_block);
    base[i + 1] = base[i] + static_cast<size_t>(hi[i] - lo[i] + 1);
  }
  const size_t source = base[n], sink = base[n] + 1, nodes = base[n] + 2;
  auto node = [&](size_t i, int64_t b) { return base[i] + static_cast<size_t>(b - lo[i]); };
  auto server_of = [&](size_t u) {  // the server a node other than the client's belongs to
    return static_cast<size_t>(std::upper_bound(base.begin(), base.begin() + static_cast<long>(n) + 1, u) -
                               base.begin()) -
           1;
  };
  std::vector<std::vector<size_t>> at_block(static_cast<size_t>(last - first));  // servers covering each block
  for (size_t i = 0; i < n; ++i)
    for (int64_t b = lo[i]; b < hi[i]; ++b) at_block[static_cast<size_t>(b - first)].push_back(i);
  std::vector<double> per_block(n), entry(n, 0), ready(n, 0);
  for (size_t i = 0; i < n; ++i) {
    per_block[i] = costs.per_block(*usable[i]);
    if (costs.entry) entry[i] = costs.entry(*usable[i]);
    if (costs.ready) ready[i] = costs.ready(*usable[i]);
  }
  const latency_model net{costs.client_rtt_ms};

  // Dijkstra over arrival times. Ties go to the node reached first (earlier servers in `servers`).
  std::vector<double> dist(nodes, std::numeric_limits<double>::infinity());
  std::vector<size_t> prev(nodes, nodes);
  using item = std::pair<double, size_t>;
  std::priority_queue<item, std::vector<item>, std::greater<item>> queue;
  auto reach = [&](size_t from, size_t to, double at) {
    if (at < dist[to]) {
      dist[to] = at;
      prev[to] = from;
      queue.push({at, to});
    }
  };
  auto enter = [&](size_t from, size_t j, int64_t b, double arrival) {
    reach(from, node(j, b), std::max(arrival + entry[j], ready[j]));
  };
  dist[source] = 0;
  queue.push({0, source});
  while (!queue.empty()) {
    auto [t, u] = queue.top();
    queue.pop();
    if (t > dist[u]) continue;
    if (u == sink) break;
    if (u == source) {
      for (size_t i : at_block[0]) enter(u, i, first, net.client_leg(*usable[i]));
      continue;
    }
    const size_t i = server_of(u);
    const int64_t b = lo[i] + static_cast<int64_t>(u - base[i]);
    if (b == last) {
      reach(u, sink, t + net.client_leg(*usable[i]));
      continue;
    }
    if (b < hi[i]) reach(u, node(i, b + 1), t + per_block[i]);
    if (b > lo[i])  // hand over only after running at least one block here
      for (size_t j : at_block[static_cast<size_t>(b - first)])
        if (j != i) enter(u, j, b, t + net.handover(*usable[i], *usable[j]));
  }
  if (prev[sink] == nodes) {
    plan.error = find_gap(servers, first, last, excluded).value_or("no route over blocks " + block_span(first, last));
    return plan;
  }
  plan.seconds = dist[sink];
  // Walk back; a run of nodes on one server is a hop, done when its last node is reached.
  std::vector<size_t> path;
  for (size_t u = prev[sink]; u != source; u = prev[u]) path.push_back(u);
  std::reverse(path.begin(), path.end());
  for (size_t k = 0; k + 1 < path.size(); ++k) {
    const size_t i = server_of(path[k]);
    if (server_of(path[k + 1]) != i) continue;  // a handover: the next node starts the next hop
    const int64_t b = lo[i] + static_cast<int64_t>(path[k] - base[i]);
    if (plan.hops.empty() || plan.hops.back().address != usable[i]->address || plan.hops.back().last != b) {
      plan.hops.push_back({usable[i]->address, b, b + 1, usable[i]->owner, usable[i]->dtype, usable[i]->kv_dtype});
      plan.hop_done.push_back(0);
    } else {
      plan.hops.back().last = b + 1;
    }
    plan.hop_done.back() = dist[path[k + 1]];
  }
  return plan;
}

route_plan plan_route(const std::vector<server_info>& servers, int64_t first, int64_t last,
                      const std::set<std::string>& excluded, int64_t min_cache_tokens,
                      const std::map<std::string, double>& penalty,
                      const std::map<std::string, double>& client_rtt_ms) {
  chain_costs costs;
  costs.per_block = [](const server_info& s) {
    const double rps = s.inference_rps > 0 ? s.inference_rps : s.throughput > 0 ? s.throughput : kDefaultInferenceRps;
    return 1.0 / rps;
  };
  costs.entry = [&](const server_info& s) {
    double c = 0;
    if (auto it = penalty.find(peer_id(s)); it != penalty.end()) c += std::max(0.0, it->second);
    if (s.cache_tokens_left < min_cache_tokens) c += kNoCacheRoomPenalty;
    return c;
  };
  costs.client_rtt_ms = client_rtt_ms;
  return fastest_chain(servers, first, last, excluded, costs);
}

}  // namespace corolla
