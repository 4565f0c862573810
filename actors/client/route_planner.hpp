// Choosing a chain of servers that covers blocks [first, last). Plain functions over server infos, so they are
// unit-tested without actors.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/protocol/messages.hpp"

namespace corolla {

struct planned_hop {
  std::string address;
  int64_t first = 0, last = 0;  // the blocks this hop runs, [first, last)
};

struct route_plan {
  std::vector<planned_hop> hops;
  std::string error;  // why no route exists ("no server for blocks 12..19"), empty on success
  bool ok() const { return error.empty(); }
};

// Greedy cover: at each block, the server that reaches furthest (ties: more free cache, then higher throughput).
// Servers in `excluded` (addresses) and servers without `min_cache_tokens` free are skipped.
route_plan plan_route(const std::vector<server_info>& servers, int64_t first, int64_t last,
                      const std::set<std::string>& excluded = {}, int64_t min_cache_tokens = 0);

}  // namespace corolla
