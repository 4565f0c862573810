// Spreading a forward or backward pass (no KV cache) over the swarm: the batch is cut into sub-batches and each
// goes along its own chain of servers, so that the whole batch is done as early as possible. A plain function
// over server infos, for the training code and tests.
//
// Sub-batches are assigned in turn, each to the chain on which it would finish earliest given the work already
// assigned (fastest_chain with every server busy until it has finished what it holds; a server runs its
// sub-batches one after another at its forward rate). With servers that each hold the whole span, this splits
// the rows in proportion to their throughput; with overlapping spans it also balances the servers in between.
// Petals picks a random chain per sub-batch, weighted by throughput, which can pile work on one server by chance.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "actors/client/route_planner.hpp"

namespace corolla {

struct batch_part {
  int64_t begin = 0, end = 0;  // rows [begin, end) of the batch
  std::vector<planned_hop> hops;
  double done = 0;  // expected seconds until its output is back at the client
};

struct batch_plan {
  std::vector<batch_part> parts;
  double seconds = 0;  // expected time until every part is back
  std::string error;   // why no chain exists ("no server for blocks 12..19"), empty on success
  bool ok() const { return error.empty(); }
};

inline constexpr double kDefaultForwardRps = 300;  // tokens/s per block of a server announcing no rate

// `rows` sequences of `tokens_per_row` tokens over blocks [first, last), in sub-batches of at most `max_rows`
// rows. A server's forward rate is its announced forward_rps, else its throughput, else kDefaultForwardRps.
// `excluded`, `penalty` and `client_rtt_ms` as for plan_route. Throws std::invalid_argument on rows,
// tokens_per_row or max_rows below 1.
batch_plan spread_batch(const std::vector<server_info>& servers, int64_t first, int64_t last, int64_t rows,
                        int64_t tokens_per_row, int64_t max_rows, const std::set<std::string>& excluded = {},
                        const std::map<std::string, double>& penalty = {},
                        const std::map<std::string, double>& client_rtt_ms = {});

}  // namespace corolla
