// Balancing and routing as plain functions on constructed swarms: which span a new server takes, whether a
// serving server moves, which chain an inference session takes, and how a forward batch is spread.
#define BOOST_TEST_MODULE balance
#include <boost/test/unit_test.hpp>
#include <map>
#include <random>

#include "actors/balance/block_selection.hpp"
#include "actors/balance/rebalance.hpp"
#include "actors/client/batch_spread.hpp"
#include "actors/client/route_planner.hpp"

using namespace corolla;

namespace {

server_info server(const std::string& address, int64_t first, int64_t last, double throughput = 1,
                   const std::string& state = "online") {
  server_info s;
  s.address = address;
  s.first_block = first;
  s.last_block = last;
  s.total_blocks = 8;
  s.throughput = throughput;
  s.state = state;
  s.cache_tokens_left = 1000;
  return s;
}

std::string hops_of(const route_plan& p) {
  std::string out;
  for (const auto& h : p.hops) out += h.address + "[" + std::to_string(h.first) + "," + std::to_string(h.last) + ")";
  return p.ok() ? out : p.error;
}

rebalance_check check(const std::vector<server_info>& swarm, const std::string& self, double quality = 0.75) {
  std::mt19937_64 rng(7);
  return check_rebalance(swarm, self, 8, quality, rng);
}

}  // namespace

// --- choosing a span --------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_new_server_fills_the_gap) {
  auto t = block_throughputs({server("a", 0, 3), server("b", 5, 8)}, 8);
  BOOST_TEST(t == (std::vector<double>{1, 1, 1, 0, 0, 1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(choose_first_block(t, 2) == 3);
  // A wider server covers the gap and the least covered blocks: windows 1..3 tie, the lowest wins.
  BOOST_TEST(choose_first_block(t, 4) == 1);
}

BOOST_AUTO_TEST_CASE(a_new_server_joins_the_very_slow_one) {
  // Everything is covered; blocks 4..7 only by a server 100 times slower.
  auto t = block_throughputs({server("fast", 0, 4, 100), server("slow", 4, 8, 1)}, 8);
  BOOST_TEST(choose_first_block(t, 4) == 4);
  BOOST_TEST(choose_first_block(t, 2) == 4);
}

BOOST_AUTO_TEST_CASE(when_every_server_sits_on_one_span_a_new_one_goes_elsewhere) {
  auto t = block_throughputs({server("a", 0, 4), server("b", 0, 4), server("c", 0, 4)}, 8);
  BOOST_TEST(choose_first_block(t, 4) == 4);
  BOOST_TEST(choose_first_block(t, 8) == 0);
}

BOOST_AUTO_TEST_CASE(ties_go_to_the_lowest_start_and_zero_throughput_counts_as_one) {
  BOOST_TEST(choose_first_block(std::vector<double>(8, 0.0), 3) == 0);
  auto t = block_throughputs({server("a", 0, 4, 0)}, 8);
  BOOST_TEST(t[0] == 1.0);
  BOOST_CHECK_THROW(choose_first_block(t, 9), std::invalid_argument);
  BOOST_CHECK_THROW(choose_first_block(t, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_joining_server_re_chooses_over_the_others_and_keeps_its_window_on_a_tie) {
  // Three servers started together all read an empty swarm and reserved blocks 0..3. Re-reading one at a time
  // (each over the others' reservations), the second moves to the uncovered half; the third then sees 0..3 and
  // 4..7 equally served and keeps its reservation.
  std::vector<server_info> swarm{server("a", 0, 4), server("b", 0, 4), server("c", 0, 4)};
  auto others_of = [&](const std::string& self) {
    std::vector<server_info> others;
    for (const auto& s : swarm)
      if (s.address != self) others.push_back(s);
    return block_throughputs(others, 8);
  };
  BOOST_TEST(rechoose_first_block(others_of("b"), 4, 0, 1) == 4);
  swarm[1].first_block = 4;
  swarm[1].last_block = 8;
  BOOST_TEST(rechoose_first_block(others_of("c"), 4, 0, 1) == 0);
  // A reservation on the later of two equal windows is kept too, where a fresh choice takes the lowest start.
  swarm[2].first_block = 4;
  swarm[2].last_block = 8;
  BOOST_TEST(choose_first_block(others_of("c"), 4) == 0);
  BOOST_TEST(rechoose_first_block(others_of("c"), 4, 4, 1) == 4);
  // A clearly better window still wins.
  swarm[0].throughput = 3;
  BOOST_TEST(rechoose_first_block(others_of("c"), 4, 0, 1) == 4);
  BOOST_CHECK_THROW(rechoose_first_block(others_of("c"), 4, 5, 1), std::invalid_argument);
}

// --- rebalancing ------------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(servers_piled_on_one_span_move_to_the_gap) {
  std::vector<server_info> swarm{server("a", 0, 4), server("b", 0, 4), server("c", 0, 4)};
  auto r = check(swarm, "b");
  BOOST_TEST(r.move, r.reason);
  BOOST_TEST(r.new_first == 4);
  BOOST_TEST(r.current_min == 0.0);
  BOOST_TEST(r.reachable_min > 0.0);
}

BOOST_AUTO_TEST_CASE(a_server_never_moves_when_it_alone_serves_a_block) {
  // b alone serves blocks 4..7; the gap is elsewhere, but moving would open a new one while it loads.
  std::vector<server_info> swarm{server("a", 0, 2), server("b", 4, 8)};
  auto r = check(swarm, "b");
  BOOST_TEST(!r.move);
  BOOST_TEST(r.reason.find("block 4 has no other online server") != std::string::npos, r.reason);
  // A joining server does not count as serving: it may still fail to load.
  swarm.push_back(server("c", 4, 8, 1, "joining"));
  BOOST_TEST(!check(swarm, "b").move);
  swarm.back().state = "online";
  auto moved = check(swarm, "b");
  BOOST_TEST(moved.move, moved.reason);
  BOOST_TEST(moved.new_first == 2);  // the weakest window: the gap at 2..3 and the least covered blocks after it
}

BOOST_AUTO_TEST_CASE(a_fast_server_moves_to_the_slow_blocks) {
  std::vector<server_info> swarm{server("a", 0, 4, 10), server("b", 0, 4, 10), server("c", 4, 8, 1),
                                 server("d", 4, 8, 1)};
  auto r = check(swarm, "b");
  BOOST_TEST(r.move, r.reason);
  BOOST_TEST(r.new_first == 4);
  BOOST_TEST(r.current_min == 2.0);
  BOOST_TEST(r.reachable_min >= 10.0);
  // The slow servers gain little by moving onto the fast ones' blocks and stay.
  BOOST_TEST(!check(swarm, "c").move);
}

BOOST_AUTO_TEST_CASE(a_small_imbalance_is_left_alone_below_the_balance_quality) {
  // c moving from 0..3 to 4..7 raises the minimum from 8 to 10: quality 0.8.
  std::vector<server_info> swarm{server("a", 0, 4, 10), server("c", 0, 4, 2), server("b", 4, 8, 8)};
  auto r = check(swarm, "c", 0.75);
  BOOST_TEST(!r.move, r.reason);
  BOOST_TEST(r.quality == 0.8, boost::test_tools::tolerance(1e-9));
  auto strict = check(swarm, "c", 0.9);
  BOOST_TEST(strict.move, strict.reason);
  BOOST_TEST(strict.new_first == 4);
}

BOOST_AUTO_TEST_CASE(a_settling_server_without_sessions_moves_for_any_gain) {
  // The swarm of the previous case: quality 0.8, above Petals' 0.75, so a server that has served a while stays;
  // one in its settling window with no session open moves (quality 1), and so does none with balancing off.
  std::vector<server_info> swarm{server("a", 0, 4, 10), server("c", 0, 4, 2), server("b", 4, 8, 8)};
  BOOST_TEST(check_quality(0.75, false, 0) == 0.75);
  BOOST_TEST(check_quality(0.75, true, 3) == 0.75);  // sessions would fail over
  BOOST_TEST(check_quality(0.75, true, 0) == 1.0);
  BOOST_TEST(check_quality(0, true, 0) == 0.0);  // 0 never moves
  BOOST_TEST(check_quality(1.01, true, 0) == 1.01);
  BOOST_TEST(!check(swarm, "c", check_quality(0.75, false, 0)).move);
  auto settling = check(swarm, "c", check_quality(0.75, true, 0));
  BOOST_TEST(settling.move, settling.reason);
  BOOST_TEST(settling.new_first == 4);
  // Where nothing better can be reached, a settling server stays all the same.
  std::vector<server_info> even{server("a", 0, 4), server("b", 4, 8), server("c", 0, 4), server("d", 4, 8)};
  BOOST_TEST(!check(even, "c", check_quality(0.75, true, 0)).move);
}

BOOST_AUTO_TEST_CASE(a_server_already_at_its_best_place_stays) {
  std::vector<server_info> swarm{server("a", 0, 4), server("b", 4, 8), server("c", 0, 4), server("d", 4, 8)};
  auto r = check(swarm, "c");
  BOOST_TEST(!r.move);
  BOOST_TEST(r.reason == "already at its best place");
}

BOOST_AUTO_TEST_CASE(the_check_needs_the_server_itself) {
  std::mt19937_64 rng(1);
  BOOST_CHECK_THROW(check_rebalance({server("a", 0, 4)}, "zz", 8, 0.75, rng), std::invalid_argument);
}

// --- inference routes -------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(routing_prefers_the_faster_chain) {
  auto slow = server("slow", 0, 8);
  slow.inference_rps = 10;  // 0.8 s for 8 blocks
  auto b = server("b", 0, 4), c = server("c", 4, 8);
  b.inference_rps = c.inference_rps = 1000;
  b.pings = {{"c", 2.0}};
  auto p = plan_route({slow, b, c}, 0, 8);
  BOOST_TEST(hops_of(p) == "b[0,4)c[4,8)");
  // Now the single server is the fast one.
  slow.inference_rps = 10000;
  BOOST_TEST(hops_of(plan_route({slow, b, c}, 0, 8)) == "slow[0,8)");
}

BOOST_AUTO_TEST_CASE(routing_uses_measured_round_trips) {
  auto far = server("far", 0, 8), near = server("near", 0, 8);
  far.inference_rps = near.inference_rps = 1000;
  // Equal servers: the first listed wins the tie...
  BOOST_TEST(hops_of(plan_route({far, near}, 0, 8)) == "far[0,8)");
  // ...until the client has measured that "far" is 400 ms away.
  auto p = plan_route({far, near}, 0, 8, {}, 0, {}, {{"far", 400.0}, {"near", 4.0}});
  BOOST_TEST(hops_of(p) == "near[0,8)");
  BOOST_TEST(p.seconds == 8 / 1000.0 + 0.004, boost::test_tools::tolerance(1e-9));
  // A slow hand-over (b's announced ping to c) makes the single server the better route.
  auto b = server("b", 0, 4), c = server("c", 4, 8);
  b.inference_rps = c.inference_rps = 2000;
  b.pings = {{"c", 300.0}};
  BOOST_TEST(hops_of(plan_route({b, c, far}, 0, 8)) == "far[0,8)");
  b.pings = {{"c", 1.0}};
  BOOST_TEST(hops_of(plan_route({b, c, far}, 0, 8)) == "b[0,4)c[4,8)");
}

BOOST_AUTO_TEST_CASE(routing_avoids_servers_without_cache_room_unless_there_is_no_other) {
  auto full = server("full", 0, 8), roomy = server("roomy", 0, 8);
  full.inference_rps = 10000;
  roomy.inference_rps = 100;
  full.cache_tokens_left = 100;
  BOOST_TEST(hops_of(plan_route({full, roomy}, 0, 8, {}, 512)) == "roomy[0,8)");
  BOOST_TEST(hops_of(plan_route({full, roomy}, 0, 8, {}, 64)) == "full[0,8)");
  // The only server of blocks 0..3 is full: still a route (the server will say it is out of cache).
  auto a = server("a", 0, 4);
  a.cache_tokens_left = 0;
  BOOST_TEST(hops_of(plan_route({a, server("b", 4, 8)}, 0, 8, {}, 512)) == "a[0,4)b[4,8)");
}

BOOST_AUTO_TEST_CASE(routing_skips_excluded_and_penalised_peers) {
  std::vector<server_info> s{server("a", 0, 8), server("b", 0, 8)};
  BOOST_TEST(hops_of(plan_route(s, 0, 8, {"a"})) == "b[0,8)");
  BOOST_TEST(hops_of(plan_route(s, 0, 8, {}, 0, {{"a", 2.0}})) == "b[0,8)");
  BOOST_TEST(hops_of(plan_route(s, 0, 8, {"a", "b"})) == "no server for blocks 0:8");
}

BOOST_AUTO_TEST_CASE(routing_names_the_gap) {
  std::vector<server_info> s{server("a", 0, 3), server("b", 5, 8)};
  auto p = plan_route(s, 0, 8);
  BOOST_TEST(!p.ok());
  BOOST_TEST(p.error == "no server for blocks 3:5");
  BOOST_TEST(p.hops.empty());
  BOOST_TEST(hops_of(plan_route(s, 5, 8)) == "b[5,8)");
}

BOOST_AUTO_TEST_CASE(routing_uses_part_of_overlapping_spans) {
  auto p = plan_route({server("a", 0, 3), server("b", 1, 4)}, 0, 4);
  BOOST_REQUIRE(p.ok());
  BOOST_TEST(p.hops.size() == 2u);
  BOOST_TEST(p.hops.front().first == 0);
  BOOST_TEST(p.hops.back().last == 4);
  BOOST_TEST(p.hops.front().last == p.hops.back().first);
}

// --- spreading forward batches ----------------------------------------------------------------------------------

// Block-rows of work each server got.
std::map<std::string, int64_t> work_of(const batch_plan& plan) {
  std::map<std::string, int64_t> out;
  for (const auto& p : plan.parts)
    for (const auto& h : p.hops) out[h.address] += (p.end - p.begin) * (h.last - h.first);
  return out;
}

BOOST_AUTO_TEST_CASE(a_batch_is_split_in_proportion_to_throughput) {
  auto fast = server("fast", 0, 8), slow = server("slow", 0, 8);
  fast.forward_rps = 3000;
  slow.forward_rps = 1000;
  auto plan = spread_batch({slow, fast}, 0, 8, 40, 128, 1);
  BOOST_REQUIRE(plan.ok());
  // 320 block-rows: about 3/4 on the fast server (a row may also move from one server to the other mid-way).
  auto work = work_of(plan);
  BOOST_TEST(work["fast"] + work["slow"] == 320);
  BOOST_TEST(work["fast"] >= 230);
  BOOST_TEST(work["fast"] <= 250);
  // Every row exactly once, in order.
  int64_t next = 0;
  for (const auto& p : plan.parts) {
    BOOST_TEST(p.begin == next);
    next = p.end;
  }
  BOOST_TEST(next == 40);
  // Done within 5% of the best any split can do (all work at the combined rate), plus the two client legs.
  const double ideal = 40.0 * 128 * 8 / 4000;
  BOOST_TEST(plan.seconds <= ideal * 1.05 + 2 * kDefaultOneWaySeconds);
  // Sending everything to the fast server would take 10.9 s, and a random choice weighted 3:1 leaves one of
  // them with more than its share most of the time.
}

BOOST_AUTO_TEST_CASE(a_batch_uses_every_chain_over_overlapping_spans) {
  // One full server, and a chain of two as fast: all three get work, and the batch is done sooner than on either
  // chain alone (the whole server alone: 8.2 s; the chain of two alone: over 4.1 s).
  auto whole = server("whole", 0, 8), left = server("left", 0, 4), right = server("right", 4, 8);
  whole.forward_rps = left.forward_rps = right.forward_rps = 1000;
  auto plan = spread_batch({whole, left, right}, 0, 8, 16, 64, 2);
  BOOST_REQUIRE(plan.ok());
  BOOST_TEST(plan.parts.size() == 8u);
  auto work = work_of(plan);
  BOOST_TEST(work.size() == 3u);
  BOOST_TEST(plan.seconds < 4.1);
}

BOOST_AUTO_TEST_CASE(spreading_reports_gaps_and_bad_sizes) {
  auto plan = spread_batch({server("a", 0, 4)}, 0, 8, 4, 16, 2);
  BOOST_TEST(plan.error == "no server for blocks 4:8");
  BOOST_CHECK_THROW(spread_batch({server("a", 0, 8)}, 0, 8, 0, 16, 2), std::invalid_argument);
  BOOST_CHECK_THROW(spread_batch({server("a", 0, 8)}, 0, 8, 4, 16, 0), std::invalid_argument);
  auto one = spread_batch({server("a", 0, 8)}, 0, 8, 5, 16, 2);
  BOOST_REQUIRE(one.ok());
  BOOST_TEST(one.parts.size() == 3u);  // 2 + 2 + 1 rows
}
