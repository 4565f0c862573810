// What a client remembers about the servers it has used: successes, failures, a latency EWMA, and bans that grow
// with each failure in a row (base × 2^(k-1), capped). Plain C++ so that it is unit-tested without actors; the
// swarm client owns one and persists it in the node store's `reputation` column family when it has one.
//
// Times are milliseconds since the Unix epoch, passed in by the caller: bans survive a restart of the client.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "actors/store/node_store.hpp"

namespace corolla {

struct ban_policy {
  std::chrono::milliseconds base{15'000};      // the first ban
  std::chrono::milliseconds max{30 * 60'000};  // the longest ban
  double latency_alpha = 0.2;                  // weight of a new latency sample in the EWMA
  double failure_cost_seconds = 2.0;           // what a failure costs a session (detection, re-route, replay)
};

class ReputationBook {
 public:
  // Loads every stored entry when `store` is given; later changes are written back by flush().
  explicit ReputationBook(ban_policy policy = {}, std::shared_ptr<NodeStore> store = nullptr);

  void record_success(const std::string& peer, double latency_ms);
  // Counts a failure and bans the peer; returns how long the ban lasts. Written to the store at once.
  std::chrono::milliseconds record_failure(const std::string& peer, int64_t now_ms);

  bool banned(const std::string& peer, int64_t now_ms) const;
  std::set<std::string> banned_peers(int64_t now_ms) const;
  // Expected extra seconds a route through `peer` costs: its estimated failure probability (Laplace-smoothed
  // over its history, so an unknown peer gets a small prior) times the cost of a failure.
  double penalty_seconds(const std::string& peer) const;
  // Every peer with an entry and its penalty (for the route planner).
  std::map<std::string, double> penalties() const;

  std::optional<PeerReputation> get(const std::string& peer) const;
  // Every peer with an entry.
  const std::map<std::string, PeerReputation>& all() const { return peers_; }
  // Writes entries changed since the last flush to the store (no-op without one).
  void flush();

  static int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

 private:
  ban_policy policy_;
  std::shared_ptr<NodeStore> store_;
  std::map<std::string, PeerReputation> peers_;
  std::set<std::string> dirty_;
};

}  // namespace corolla
