// Choosing chains of servers that cover blocks [first, last). Plain functions over server infos, so they are
// unit-tested without actors.
//
// fastest_chain searches Petals' (server, block) graph: a node (s, b) means "the hidden states are at server s,
// before block b". Edges:
//   client -> (s, first)           the client leg to s (latency_model) + entering s
//   (s, b) -> (s, b + 1)           one block's compute on s
//   (s, b) -> (t, b)               handing over from s to t (after at least one block on s) + entering t
//   (s, last) -> client            the leg back to the client
// Entering a server costs its entry penalty and, when it is busy until some time, waiting for it: arriving at t,
// work there starts at max(t, ready). Waiting keeps arrival order (FIFO), so Dijkstra's answer is the earliest
// finish.
//
// plan_route: an inference session's chain of minimum expected latency per step (compute = 1 / the server's
// inference rate per block; entering costs the caller's penalty for the peer, plus kNoCacheRoomPenalty when the
// server announces less free cache than the session needs: it would refuse the session, but a route through it is
// better than none).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/client/latency_model.hpp"
#include "actors/protocol/messages.hpp"

namespace corolla {

struct planned_hop {
  std::string address;
  int64_t first = 0, last = 0;  // the blocks this hop runs, [first, last)
  std::string owner;            // the key its DHT record names (hex): the server must prove it holds it
  std::string dtype;            // the serving dtype it announces (spot checks compare within its tolerance)
  std::string kv_dtype;         // the dtype of its KV caches it announces ("" or "f32", "f16": ditto)
  bool unchecked = false;       // no spot check of this client has covered the server yet (the swarm client sets it)
};

// Who a server is to the client's bookkeeping (reports, bans, penalties): its key when its record named one,
// else its address. Keyed by key, a record naming someone else's address costs its signer, not that address.
inline const std::string& peer_id(const server_info& s) { return s.owner.empty() ? s.address : s.owner; }
inline const std::string& peer_id(const planned_hop& h) { return h.owner.empty() ? h.address : h.owner; }
// Whether `excluded` names the server, by key or by address.
inline bool is_excluded(const std::set<std::string>& excluded, const server_info& s) {
  return excluded.count(s.address) || (!s.owner.empty() && excluded.count(s.owner));
}

struct route_plan {
  std::vector<planned_hop> hops;
  std::vector<double> hop_done;  // per hop: when its server is done with it, seconds after the client sends
  double seconds = 0;            // the expected latency of the whole chain, back at the client
  std::string error;             // why no route exists ("no server for blocks 12..19"), empty on success
  bool ok() const { return error.empty(); }
};

inline constexpr double kDefaultInferenceRps = 300;  // tokens/s per block of a server announcing no rate (Petals')
inline constexpr double kNoCacheRoomPenalty = 10;    // seconds for entering a server without room for the cache

struct chain_costs {
  std::function<double(const server_info&)> per_block;  // seconds to run one block on the server
  std::function<double(const server_info&)> entry;      // extra seconds for entering it (may be empty: 0)
  std::function<double(const server_info&)> ready;      // it is busy until then (may be empty: free now)
  std::map<std::string, double> client_rtt_ms;          // for the network legs (latency_model)
};

// The chain of earliest finish; servers in `excluded` (addresses) are never used.
route_plan fastest_chain(const std::vector<server_info>& servers, int64_t first, int64_t last,
                         const std::set<std::string>& excluded, const chain_costs& costs);

// `min_cache_tokens`: the cache tokens per block the session needs. `penalty`: extra seconds for entering a
// server (by address), e.g. from the client's reputation store. `client_rtt_ms`: the client's smoothed round
// trips to servers (by address).
route_plan plan_route(const std::vector<server_info>& servers, int64_t first, int64_t last,
                      const std::set<std::string>& excluded = {}, int64_t min_cache_tokens = 0,
                      const std::map<std::string, double>& penalty = {},
                      const std::map<std::string, double>& client_rtt_ms = {});

// "no server for blocks A..B" when the servers not excluded leave blocks of [first, last) uncovered (A: the first
// such block, B: the last block before one is covered again); nullopt when they cover it.
std::optional<std::string> find_gap(const std::vector<server_info>& servers, int64_t first, int64_t last,
                                    const std::set<std::string>& excluded = {});

}  // namespace corolla
