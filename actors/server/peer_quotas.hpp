// What one remote peer may hold of a server: open sessions, reserved KV cache, and requests per second. Without
// them one client could open every session a server allows, reserve its whole cache, or flood it with requests
// while everyone else waits. Beyond a quota the server answers `too_busy` with a retry hint, and the client routes
// elsewhere (actors/client/inference_session.cpp).
//
// A peer is a CAF node (one client or server process). Node ids cost nothing to make, so a peer with many of them
// gets as many quotas, but each needs its own connection and the peer gateway caps connections per IP address
// (peer_limits.hpp): max_peer_connections_per_address bounds what one address can hold.
//
// Plain C++ over any ordered peer key and a steady clock's time points, so that it is unit-tested without actors.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace corolla {

// A server's per-peer quotas as its configuration states them (node_config.hpp: max_sessions_per_peer,
// cache_tokens_per_peer, peer_requests_per_second).
struct peer_quota_options {
  int64_t sessions = 32;
  int64_t cache_tokens = 4096;  // per hosted block, like the server's cache_tokens
  double requests_per_second = 1000;
};

// The same, as a PeerQuotas applies them over a span.
struct peer_quota {
  int64_t sessions = 32;              // open inference sessions
  int64_t cache = INT64_MAX;          // reserved KV cache, in token·blocks (batch · max_length · blocks)
  double requests_per_second = 1000;  // opens, steps, forwards and backwards (a burst of one second's worth)
};

struct quota_refusal {
  std::string why;                        // "this peer holds 32 of its 32 sessions here"
  std::chrono::milliseconds retry_after;  // when trying again may succeed
};

// How long a client at its session or cache quota is told to wait: sessions end at times the server cannot know.
inline constexpr std::chrono::milliseconds kHeldQuotaRetry{5000};

template <class Peer, class TimePoint = std::chrono::steady_clock::time_point>
class PeerQuotas {
 public:
  explicit PeerQuotas(peer_quota quota = {}) : quota_(quota) {}

  const peer_quota& quota() const { return quota_; }

  // Whether `peer` may open one more session reserving `cache` token·blocks. Records nothing: opened() does.
  std::optional<quota_refusal> admit_session(const Peer& peer, int64_t cache) const {
    auto it = peers_.find(peer);
    const int64_t sessions = it == peers_.end() ? 0 : it->second.sessions;
    const int64_t held = it == peers_.end() ? 0 : it->second.cache;
    if (sessions >= quota_.sessions)
      return quota_refusal{"this client holds " + std::to_string(sessions) + " sessions here, its quota is " +
                               std::to_string(quota_.sessions),
                           kHeldQuotaRetry};
    if (cache > quota_.cache - held)
      return quota_refusal{"this client holds " + std::to_string(held) + " of its " + std::to_string(quota_.cache) +
                               " cache token·blocks here; the session needs " + std::to_string(cache),
                           kHeldQuotaRetry};
    return std::nullopt;
  }
  void opened(const Peer& peer, int64_t cache) {
    auto& u = peers_[peer];
    ++u.sessions;
    u.cache += cache;
  }
  void closed(const Peer& peer, int64_t cache) {
    auto it = peers_.find(peer);
    if (it == peers_.end()) return;
    it->second.sessions = std::max<int64_t>(0, it->second.sessions - 1);
    it->second.cache = std::max<int64_t>(0, it->second.cache - cache);
  }

  // Takes one request from `peer`'s token bucket (refilled at requests_per_second, holding one second's worth);
  // a refusal when it is empty.
  std::optional<quota_refusal> admit_request(const Peer& peer, TimePoint now) {
    const double rate = quota_.requests_per_second, burst = std::max(1.0, rate);
    auto& u = peers_[peer];
    if (!u.bucket_started) {
      u.bucket_started = true;
      u.tokens = burst;
      u.refilled = now;
    } else if (now > u.refilled) {
      u.tokens = std::min(burst, u.tokens + rate * std::chrono::duration<double>(now - u.refilled).count());
      u.refilled = now;
    }
    if (u.tokens >= 1) {
      u.tokens -= 1;
      return std::nullopt;
    }
    const auto wait = std::chrono::duration<double>((1 - u.tokens) / rate);
    return quota_refusal{"this client sends more than its quota of " + format_rate(rate) + " requests per second",
                         std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(wait))};
  }

  // Forgets peers that hold nothing and whose bucket has refilled: what is left is as before.
  void sweep(TimePoint now) {
    const double rate = quota_.requests_per_second;
    const auto full = std::chrono::duration<double>(std::max(1.0, rate) / rate);  // an empty bucket's refill
    for (auto it = peers_.begin(); it != peers_.end();) {
      const auto& u = it->second;
      const bool idle = u.sessions == 0 && u.cache == 0 &&
                        (!u.bucket_started || std::chrono::duration<double>(now - u.refilled) >= full);
      it = idle ? peers_.erase(it) : std::next(it);
    }
  }
  size_t tracked_peers() const { return peers_.size(); }

 private:
  struct usage {
    int64_t sessions = 0, cache = 0;
    bool bucket_started = false;
    double tokens = 0;
    TimePoint refilled{};
  };
  static std::string format_rate(double r) {
    return r == std::floor(r) && r < 1e15 ? std::to_string(static_cast<int64_t>(r)) : std::to_string(r);
  }

  peer_quota quota_;
  std::map<Peer, usage> peers_;
};

}  // namespace corolla
