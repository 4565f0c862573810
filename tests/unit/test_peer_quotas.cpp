// Per-peer quotas of a server (actors/server/peer_quotas.hpp): sessions, reserved cache and request rate are
// counted per peer, a peer at its quota is refused with a retry hint while others are not, and what a peer
// releases it may take again. What limits per address count (actors/net/address_block.hpp).
#define BOOST_TEST_MODULE peer_quotas
#include <boost/test/unit_test.hpp>

#include "actors/net/address_block.hpp"
#include "actors/server/peer_quotas.hpp"

using namespace corolla;
using namespace std::chrono_literals;
using time_point = std::chrono::steady_clock::time_point;

BOOST_AUTO_TEST_CASE(a_peer_at_its_session_quota_is_refused_and_another_is_not) {
  PeerQuotas<int> q(peer_quota{2, 1000, 100});
  for (int i = 0; i < 2; ++i) {
    BOOST_TEST(!q.admit_session(1, 10));
    q.opened(1, 10);
  }
  auto refused = q.admit_session(1, 10);
  BOOST_REQUIRE(refused);
  BOOST_TEST(refused->why == "this client holds 2 sessions here, its quota is 2");
  BOOST_TEST(refused->retry_after.count() > 0);
  BOOST_TEST(!q.admit_session(2, 10));
  q.closed(1, 10);
  BOOST_TEST(!q.admit_session(1, 10));
}

BOOST_AUTO_TEST_CASE(a_peer_cannot_reserve_more_cache_than_its_quota) {
  PeerQuotas<int> q(peer_quota{100, 1000, 100});
  BOOST_TEST(!q.admit_session(1, 1000));
  BOOST_TEST(bool(q.admit_session(1, 1001)));
  q.opened(1, 600);
  auto refused = q.admit_session(1, 401);
  BOOST_REQUIRE(refused);
  BOOST_TEST(refused->why == "this client holds 600 of its 1000 cache token·blocks here; the session needs 401");
  BOOST_TEST(!q.admit_session(1, 400));
  BOOST_TEST(!q.admit_session(2, 1000));
  q.closed(1, 600);
  BOOST_TEST(!q.admit_session(1, 1000));
}

BOOST_AUTO_TEST_CASE(requests_beyond_the_rate_wait_for_the_bucket_to_refill) {
  PeerQuotas<int> q(peer_quota{10, 1000, 10});  // 10 per second, a burst of 10
  const time_point t0{};
  for (int i = 0; i < 10; ++i) BOOST_TEST(!q.admit_request(1, t0));
  auto refused = q.admit_request(1, t0);
  BOOST_REQUIRE(refused);
  BOOST_TEST(refused->retry_after == 100ms);
  BOOST_TEST(!q.admit_request(2, t0));  // another peer has its own bucket
  BOOST_TEST(bool(q.admit_request(1, t0 + 50ms)));
  BOOST_TEST(!q.admit_request(1, t0 + 100ms));  // one token back after 1/10 s
  BOOST_TEST(bool(q.admit_request(1, t0 + 100ms)));
  // An idle second refills the burst, no more.
  for (int i = 0; i < 10; ++i) BOOST_TEST(!q.admit_request(1, t0 + 5s));
  BOOST_TEST(bool(q.admit_request(1, t0 + 5s)));
}

BOOST_AUTO_TEST_CASE(a_slow_rate_still_allows_one_request_and_hints_the_wait) {
  PeerQuotas<int> q(peer_quota{10, 1000, 0.5});
  const time_point t0{};
  BOOST_TEST(!q.admit_request(1, t0));
  auto refused = q.admit_request(1, t0 + 1s);
  BOOST_REQUIRE(refused);
  BOOST_TEST(refused->retry_after == 1000ms);
  BOOST_TEST(!q.admit_request(1, t0 + 2s));
}

BOOST_AUTO_TEST_CASE(the_sweep_forgets_idle_peers_only) {
  PeerQuotas<int> q(peer_quota{10, 1000, 10});
  const time_point t0{};
  q.opened(1, 5);
  BOOST_TEST(!q.admit_request(2, t0));
  BOOST_TEST(!q.admit_request(3, t0 + 900ms));
  BOOST_TEST(q.tracked_peers() == 3u);
  q.sweep(t0 + 1s);
  BOOST_TEST(q.tracked_peers() == 2u);  // 2's bucket is full again; 1 holds a session, 3 used its bucket recently
  q.closed(1, 5);
  q.sweep(t0 + 2s);
  BOOST_TEST(q.tracked_peers() == 0u);
}

// An IPv6 host may pick any address of its /64 for each connection: limits per address count the /64, and an IPv4
// address counts as itself however it arrives.
BOOST_AUTO_TEST_CASE(limits_per_address_count_an_ipv6_address_by_its_slash_64) {
  using boost::asio::ip::make_address;
  BOOST_TEST(address_block(make_address("192.0.2.7")) == "192.0.2.7");
  BOOST_TEST(address_block(make_address("::ffff:192.0.2.7")) == "192.0.2.7");
  BOOST_TEST(address_block(make_address("2001:db8:1:2::1")) == "2001:db8:1:2::/64");
  BOOST_TEST(address_block(make_address("2001:db8:1:2:ffff:ee:dd:cc")) == "2001:db8:1:2::/64");
  BOOST_TEST(address_block(make_address("2001:db8:1:3::1")) == "2001:db8:1:3::/64");
  BOOST_TEST(address_block(make_address("::1")) == "::/64");
}
