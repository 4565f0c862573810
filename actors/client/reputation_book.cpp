#include "actors/client/reputation_book.hpp"

#include <algorithm>

namespace corolla {

ReputationBook::ReputationBook(ban_policy policy, std::shared_ptr<NodeStore> store)
    : policy_(policy), store_(std::move(store)) {
  if (store_) store_->for_each_reputation([&](const std::string& peer, const PeerReputation& r) { peers_[peer] = r; });
}

void ReputationBook::record_success(const std::string& peer, double latency_ms) {
  auto& r = peers_[peer];
  r.latency_ewma_ms = r.successes == 0
                          ? latency_ms
                          : (1 - policy_.latency_alpha) * r.latency_ewma_ms + policy_.latency_alpha * latency_ms;
  ++r.successes;
  r.consecutive_failures = 0;
  dirty_.insert(peer);
}

std::chrono::milliseconds ReputationBook::record_failure(const std::string& peer, int64_t now_ms) {
  auto& r = peers_[peer];
  ++r.failures;
  const uint32_t k = std::min<uint32_t>(r.consecutive_failures, 30);
  ++r.consecutive_failures;
  const auto ban = std::min(policy_.max, policy_.base * (int64_t{1} << k));
  r.banned_until_ms = std::max(r.banned_until_ms, now_ms + ban.count());
  dirty_.insert(peer);
  flush();  // a ban must outlive a crash of this process
  return ban;
}

bool ReputationBook::banned(const std::string& peer, int64_t now_ms) const {
  auto it = peers_.find(peer);
  return it != peers_.end() && it->second.banned_until_ms > now_ms;
}

std::set<std::string> ReputationBook::banned_peers(int64_t now_ms) const {
  std::set<std::string> out;
  for (const auto& [peer, r] : peers_)
    if (r.banned_until_ms > now_ms) out.insert(peer);
  return out;
}

double ReputationBook::penalty_seconds(const std::string& peer) const {
  auto it = peers_.find(peer);
  const double ok = it == peers_.end() ? 0.0 : static_cast<double>(it->second.successes);
  const double bad = it == peers_.end() ? 0.0 : static_cast<double>(it->second.failures);
  return policy_.failure_cost_seconds * (bad + 0.01) / (ok + bad + 1.0);
}

std::map<std::string, double> ReputationBook::penalties() const {
  std::map<std::string, double> out;
  for (const auto& [peer, r] : peers_) out[peer] = penalty_seconds(peer);
  return out;
}

std::optional<PeerReputation> ReputationBook::get(const std::string& peer) const {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

void ReputationBook::flush() {
  if (store_)
    for (const auto& peer : dirty_) store_->put_reputation(peer, peers_.at(peer));
  dirty_.clear();
}

}  // namespace corolla
