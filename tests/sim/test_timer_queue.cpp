// The simulator clock's calendar queue (sim/timer_queue.hpp): the same order as one heap by (due, insertion)
// whether entries land in the current bucket, the ring ahead or beyond it; stale entries never come out; sweeping
// keeps only the live ones.
#define BOOST_TEST_MODULE timer_queue
#include <boost/test/unit_test.hpp>

#include <functional>
#include <queue>
#include <random>
#include <set>
#include <vector>

#include "sim/timer_queue.hpp"

using namespace corolla::sim;

namespace {

constexpr int64_t kBucket = int64_t{1} << timer_queue::kBucketShift;
constexpr int64_t kRing = kBucket * timer_queue::kBuckets;

// A due time `ahead` of `now`, drawn across the three ranges: within the bucket, within the ring, past it.
int64_t draw_due(std::mt19937_64& rng, int64_t now) {
  switch (rng() % 4) {
    case 0: return now + static_cast<int64_t>(rng() % kBucket);
    case 1: return now + static_cast<int64_t>(rng() % kRing);
    case 2: return now + kRing + static_cast<int64_t>(rng() % (4 * kRing));
    default: return now + static_cast<int64_t>(rng() % 1000) * kBucket;  // many on bucket boundaries, and ties
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(entries_come_out_in_the_order_of_one_heap) {
  std::mt19937_64 rng(7);
  timer_queue q;
  std::priority_queue<timer_entry, std::vector<timer_entry>, std::greater<>> reference;
  std::set<uint64_t> cancelled;  // by seq
  auto live = [&](const timer_entry& e) { return cancelled.count(e.seq) == 0; };
  uint64_t seq = 0;
  int64_t now = 5 * kBucket + 12345;
  size_t popped = 0;
  // Takes the next entry out of both; false when both are empty.
  auto take_next = [&] {
    while (!reference.empty() && !live(reference.top())) reference.pop();
    const timer_entry* front = q.front(live);
    if (reference.empty()) {
      BOOST_TEST(front == nullptr);
      return false;
    }
    BOOST_REQUIRE(front != nullptr);
    BOOST_REQUIRE_EQUAL(front->seq, reference.top().seq);
    BOOST_REQUIRE_EQUAL(front->due, reference.top().due);
    now = front->due;
    q.pop();
    reference.pop();
    ++popped;
    return true;
  };
  for (int round = 0; round < 20000; ++round) {
    const int adds = static_cast<int>(rng() % 4);
    for (int i = 0; i < adds; ++i) {
      const timer_entry e{draw_due(rng, now), seq++, 0, 0};
      q.push(e);
      reference.push(e);
      if (rng() % 5 == 0) cancelled.insert(e.seq);
    }
    if (round % 5000 == 4999) q.sweep(live);
    take_next();
  }
  while (take_next()) {
  }
  BOOST_TEST(popped > 10000u);
  BOOST_TEST(q.size() == 0u);  // every stale entry was dropped on the way
}

BOOST_AUTO_TEST_CASE(a_lone_far_entry_is_reached_across_empty_buckets) {
  timer_queue q;
  auto all = [](const timer_entry&) { return true; };
  q.push({100 * kRing + 3, 0, 0, 0});
  q.push({kBucket - 1, 1, 0, 0});
  const timer_entry* first = q.front(all);
  BOOST_REQUIRE(first != nullptr);
  BOOST_TEST(first->seq == 1u);
  q.pop();
  const timer_entry* second = q.front(all);
  BOOST_REQUIRE(second != nullptr);
  BOOST_TEST(second->due == 100 * kRing + 3);
  q.pop();
  BOOST_TEST(q.front(all) == nullptr);
  // Entries pushed after the queue moved on still land where they belong: one due now, one far ahead.
  q.push({100 * kRing + 3, 2, 0, 0});
  q.push({100 * kRing + 2 * kRing, 3, 0, 0});
  BOOST_TEST(q.front(all)->seq == 2u);
  q.pop();
  BOOST_TEST(q.front(all)->seq == 3u);
}

BOOST_AUTO_TEST_CASE(sweeping_keeps_only_live_entries) {
  timer_queue q;
  for (uint64_t i = 0; i < 1000; ++i) q.push({static_cast<int64_t>(i) * kBucket * 3, i, 0, 0});
  BOOST_TEST(q.size() == 1000u);
  auto even = [](const timer_entry& e) { return e.seq % 2 == 0; };
  q.sweep(even);
  BOOST_TEST(q.size() == 500u);
  for (uint64_t i = 0; i < 1000; i += 2) {
    const timer_entry* e = q.front(even);
    BOOST_REQUIRE(e != nullptr);
    BOOST_REQUIRE_EQUAL(e->seq, i);
    q.pop();
  }
  BOOST_TEST(q.front(even) == nullptr);
}
