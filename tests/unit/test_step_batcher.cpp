// The span gate's continuous batching (actors/server/step_batcher.hpp): which steps share a batch, how a long
// prompt is cut into chunks between the others' decode steps, how outputs and errors find their steps.
#define BOOST_TEST_MODULE step_batcher
#include <boost/test/unit_test.hpp>
#include <map>
#include <numeric>

#include "actors/server/block_messages.hpp"
#include "actors/protocol/errors.hpp"
#include "actors/server/step_batcher.hpp"

using namespace corolla;

namespace {

constexpr int64_t kD = 3;
const StepBatcher::time_point kNow{};  // time stands still unless a test moves it: no step is ever held
const step_group kGroup{0, 4};

Backend& host() {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  return *cpu;
}

// Hidden [b, t, kD] whose values name their place: 1000·seed + row.
Tensor hidden(int64_t b, int64_t t, int seed) {
  Tensor h = Tensor::empty(DType::f32, {b, t, kD});
  for (int64_t r = 0; r < b * t; ++r)
    for (int64_t j = 0; j < kD; ++j) h.data_as<float>()[r * kD + j] = static_cast<float>(1000 * seed + r);
  return h;
}

std::vector<int32_t> positions(int64_t b, int64_t t, int32_t from = 0) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < t; ++j) p.push_back(from + static_cast<int32_t>(j));
  return p;
}

// What the blocks would do, visibly: every row of every item gains 0.5.
block_batch_msg run(block_batch_msg m) {
  for (const batch_item& item : m.items)
    for (int64_t r = item.row; r < item.row + item.batch * item.tokens; ++r)
      for (int64_t j = 0; j < kD; ++j) m.hidden.data_as<float>()[r * kD + j] += 0.5f;
  return m;
}

struct Outcomes {
  std::map<int, caf::expected<Tensor>> got;
  StepBatcher::done_fn to(int seed) {
    return [this, seed](caf::expected<Tensor> out) { got.emplace(seed, std::move(out)); };
  }
  // Step `seed` ended with its input plus 0.5 everywhere.
  bool ran(int seed, int64_t b, int64_t t) const {
    auto it = got.find(seed);
    if (it == got.end() || !it->second || it->second->shape() != Shape{b, t, kD}) return false;
    const Tensor want = hidden(b, t, seed);
    for (int64_t i = 0; i < want.numel(); ++i)
      if (it->second->data_as<const float>()[i] != want.data_as<const float>()[i] + 0.5f) return false;
    return true;
  }
};

// (session, first position, tokens) of each item of a batch.
std::vector<std::tuple<uint64_t, int32_t, int64_t>> items_of(const block_batch_msg& m) {
  std::vector<std::tuple<uint64_t, int32_t, int64_t>> out;
  for (const batch_item& i : m.items) out.emplace_back(i.session, i.positions.front(), i.tokens);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(steps_that_wait_while_a_batch_runs_go_together_in_the_next) {
  StepBatcher batcher(256, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1, 5), o.to(1), kNow);
  auto first = batcher.start(kGroup, kNow);  // alone: nothing else waits, so it starts at once
  BOOST_REQUIRE(first);
  BOOST_TEST(first->msg.items.size() == 1u);
  for (int s = 2; s <= 4; ++s)
    batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 1, s), positions(1, 1), o.to(s), kNow);
  BOOST_TEST(!batcher.start(kGroup, kNow));  // one batch of a group at a time
  BOOST_TEST(batcher.waiting() == 3u);
  batcher.finish(first->id, run(std::move(first->msg)), kNow);
  BOOST_TEST(o.ran(1, 1, 1));
  auto next = batcher.start(kGroup, kNow);
  BOOST_REQUIRE(next);
  BOOST_TEST(next->msg.hidden.shape() == (Shape{3, kD}));
  BOOST_TEST(next->msg.items.size() == 3u);
  for (size_t i = 0; i < 3; ++i) {
    BOOST_TEST(next->msg.items[i].session == i + 2);  // oldest first
    BOOST_TEST(next->msg.items[i].row == static_cast<int64_t>(i));
  }
  batcher.finish(next->id, run(std::move(next->msg)), kNow);
  for (int s = 2; s <= 4; ++s) BOOST_TEST(o.ran(s, 1, 1));
  BOOST_TEST(!batcher.start(kGroup, kNow));
}

BOOST_AUTO_TEST_CASE(other_blocks_make_other_batches_and_adapters_share_one) {
  StepBatcher batcher(256, host());
  Outcomes o;
  const step_group part{1, 4};
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1), o.to(1), kNow);
  batcher.push(part, 2, "", hidden(1, 1, 2), positions(1, 1), o.to(2), kNow);
  batcher.push(kGroup, 3, "lora", hidden(1, 1, 3), positions(1, 1), o.to(3), kNow);
  auto b = batcher.start(part, kNow);
  BOOST_REQUIRE(b);
  BOOST_TEST(b->msg.items.size() == 1u);
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  b = batcher.start(kGroup, kNow);
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(b->msg.items.size() == 2u);  // each item names its session's adapter
  BOOST_TEST(b->msg.items[0].adapter == "");
  BOOST_TEST(b->msg.items[1].adapter == "lora");
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  for (int s = 1; s <= 3; ++s) BOOST_TEST(o.ran(s, 1, 1));
}

BOOST_AUTO_TEST_CASE(a_long_prompt_is_prefilled_in_chunks_between_the_others_decode_steps) {
  StepBatcher batcher(8, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1, 30), o.to(1), kNow);
  auto running = batcher.start(kGroup, kNow);
  batcher.push(kGroup, 2, "", hidden(1, 20, 2), positions(1, 20), o.to(2), kNow);    // a prompt of 20 tokens
  batcher.push(kGroup, 3, "", hidden(1, 1, 3), positions(1, 1, 40), o.to(3), kNow);  // a decode step after it
  batcher.finish(running->id, run(std::move(running->msg)), kNow);
  // The decode step whole, then as much of the prompt as the budget leaves.
  auto b = batcher.start(kGroup, kNow);
  using item = std::tuple<uint64_t, int32_t, int64_t>;
  BOOST_TEST((items_of(b->msg) == std::vector<item>{{3, 40, 1}, {2, 0, 7}}));
  batcher.push(kGroup, 1, "", hidden(1, 1, 4), positions(1, 1, 31), o.to(4), kNow);  // session 1's next decode step
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  BOOST_TEST(o.ran(3, 1, 1));
  BOOST_TEST(!o.got.count(2));  // not before its last chunk
  b = batcher.start(kGroup, kNow);
  BOOST_TEST((items_of(b->msg) == std::vector<item>{{1, 31, 1}, {2, 7, 7}}));
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  b = batcher.start(kGroup, kNow);
  BOOST_TEST((items_of(b->msg) == std::vector<item>{{2, 14, 6}}));  // the rest fits whole
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  BOOST_TEST(o.ran(2, 1, 20));  // the chunks' outputs in their places
  BOOST_TEST(o.ran(4, 1, 1));
}

BOOST_AUTO_TEST_CASE(a_session_of_several_sequences_is_cut_alike_in_each) {
  StepBatcher batcher(8, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(2, 10, 1), positions(2, 10, 3), o.to(1), kNow);
  auto b = batcher.start(kGroup, kNow);
  BOOST_REQUIRE(b->msg.items.size() == 1u);
  const batch_item& chunk = b->msg.items[0];
  BOOST_TEST(chunk.batch == 2);
  BOOST_TEST(chunk.tokens == 4);  // 8 rows: 4 tokens of each sequence
  BOOST_TEST(chunk.positions == (std::vector<int32_t>{3, 4, 5, 6, 3, 4, 5, 6}), boost::test_tools::per_element());
  BOOST_TEST(b->msg.hidden.data_as<const float>()[4 * kD] == 1010.0f);  // sequence 1, token 0: row 10 of the step
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  while (auto next = batcher.start(kGroup, kNow)) batcher.finish(next->id, run(std::move(next->msg)), kNow);
  BOOST_TEST(o.ran(1, 2, 10));
}

BOOST_AUTO_TEST_CASE(a_budget_smaller_than_a_session_still_moves_it_a_token_at_a_time) {
  StepBatcher batcher(1, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(3, 2, 1), positions(3, 2), o.to(1), kNow);
  int batches = 0;
  while (auto b = batcher.start(kGroup, kNow)) {
    BOOST_TEST(b->msg.items.at(0).tokens == 1);
    batcher.finish(b->id, run(std::move(b->msg)), kNow);
    ++batches;
  }
  BOOST_TEST(batches == 2);
  BOOST_TEST(o.ran(1, 3, 2));
}

BOOST_AUTO_TEST_CASE(with_batching_off_each_step_runs_alone_at_once) {
  StepBatcher batcher(0, host());
  Outcomes o;
  std::vector<StepBatcher::started> running;
  for (int s = 1; s <= 3; ++s) {
    batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 300, s), positions(1, 300), o.to(s), kNow);
    auto b = batcher.start(kGroup, kNow);
    BOOST_REQUIRE(b);
    BOOST_TEST(b->msg.items.size() == 1u);
    BOOST_TEST(b->msg.items[0].tokens == 300);  // never cut
    running.push_back(std::move(*b));
  }
  for (auto it = running.rbegin(); it != running.rend(); ++it) batcher.finish(it->id, run(std::move(it->msg)), kNow);
  for (int s = 1; s <= 3; ++s) BOOST_TEST(o.ran(s, 1, 300));
}

BOOST_AUTO_TEST_CASE(errors_reach_the_steps_they_belong_to) {
  StepBatcher batcher(4, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1), o.to(1), kNow);
  auto b = batcher.start(kGroup, kNow);
  batcher.push(kGroup, 2, "", hidden(1, 1, 2), positions(1, 1), o.to(2), kNow);
  batcher.push(kGroup, 3, "", hidden(1, 10, 3), positions(1, 10), o.to(3), kNow);  // three chunks
  batcher.finish(b->id, run(std::move(b->msg)), kNow);
  b = batcher.start(kGroup, kNow);
  BOOST_REQUIRE(b->msg.items.size() == 2u);
  block_batch_msg out = run(std::move(b->msg));
  out.items[1].error = make_error(errc::unknown_session, "block 2 has no cache for session 3");
  batcher.finish(b->id, std::move(out), kNow);
  BOOST_TEST(o.ran(2, 1, 1));
  BOOST_REQUIRE(o.got.count(3));
  BOOST_TEST(!o.got.at(3));
  BOOST_TEST(batcher.waiting() == 0u);  // its other chunks are dropped
  BOOST_TEST(!batcher.start(kGroup, kNow));

  // A batch that failed whole fails each of its steps.
  batcher.push(kGroup, 4, "", hidden(1, 1, 4), positions(1, 1), o.to(4), kNow);
  b = batcher.start(kGroup, kNow);
  batcher.finish(b->id, make_error(errc::timeout, "the step timed out"), kNow);
  BOOST_TEST(!o.got.at(4));
  // Answers naming other rows than the batch held are not trusted.
  batcher.push(kGroup, 5, "", hidden(1, 2, 5), positions(1, 2), o.to(5), kNow);
  b = batcher.start(kGroup, kNow);
  out = run(std::move(b->msg));
  out.items[0].row = 1;
  batcher.finish(b->id, std::move(out), kNow);
  BOOST_TEST(!o.got.at(5));
}

BOOST_AUTO_TEST_CASE(fail_all_ends_waiting_and_running_steps_once) {
  StepBatcher batcher(256, host());
  Outcomes o;
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1), o.to(1), kNow);
  auto b = batcher.start(kGroup, kNow);
  batcher.push(kGroup, 2, "", hidden(1, 1, 2), positions(1, 1), o.to(2), kNow);
  batcher.fail_all(make_error(errc::unknown_session, "the server moved to other blocks"));
  BOOST_TEST(o.got.size() == 2u);
  BOOST_TEST(!o.got.at(1));
  BOOST_TEST(!o.got.at(2));
  batcher.finish(b->id, run(std::move(b->msg)), kNow);  // late: ignored
  BOOST_TEST(!o.got.at(1));
  BOOST_TEST(batcher.waiting() == 0u);
}

BOOST_AUTO_TEST_CASE(an_idle_group_holds_a_step_until_the_sessions_of_its_last_batch_come) {
  using namespace std::chrono_literals;
  StepBatcher batcher(256, host());
  Outcomes o;
  const StepBatcher::time_point t0{std::chrono::seconds(1)};
  auto one_round = [&](std::vector<int> seeds, StepBatcher::time_point at) {
    for (int s : seeds)
      batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 1, s), positions(1, 1), o.to(s), at);
  };
  one_round({1, 2, 3}, t0);
  auto b = batcher.start(kGroup, t0);  // sessions never batched before wait for nobody
  BOOST_REQUIRE(b);
  BOOST_TEST(b->msg.items.size() == 3u);
  batcher.finish(b->id, run(std::move(b->msg)), t0 + 10ms);

  // Session 1 comes back first, 11 ms after its batch started: held for 2 and 3 up to half that round trip; they
  // come 1 ms later, and all three run together.
  o.got.clear();
  one_round({1}, t0 + 11ms);
  BOOST_TEST(!batcher.start(kGroup, t0 + 11ms));
  BOOST_TEST(batcher.due(t0 + 11ms).empty());
  BOOST_REQUIRE(batcher.next_hold_end());
  BOOST_TEST((*batcher.next_hold_end() == t0 + 11ms + 5500us));
  one_round({2, 3}, t0 + 12ms);
  BOOST_TEST(batcher.due(t0 + 12ms).size() == 1u);
  b = batcher.start(kGroup, t0 + 12ms);
  BOOST_REQUIRE(b);
  BOOST_TEST(b->msg.items.size() == 3u);
  batcher.finish(b->id, run(std::move(b->msg)), t0 + 22ms);

  // A session that does not come back costs one hold: the step starts when it ends (11 ms after the last start, so
  // 5.5 ms), and from then on it is not waited for.
  one_round({1, 3}, t0 + 23ms);
  BOOST_TEST(!batcher.start(kGroup, t0 + 28ms));
  b = batcher.start(kGroup, t0 + 29ms);
  BOOST_REQUIRE(b);
  BOOST_TEST(b->msg.items.size() == 2u);
  batcher.finish(b->id, run(std::move(b->msg)), t0 + 38ms);
  // A session that ended is forgotten at once.
  batcher.forget(3);
  one_round({1}, t0 + 39ms);
  b = batcher.start(kGroup, t0 + 39ms);
  BOOST_REQUIRE(b);
  batcher.finish(b->id, run(std::move(b->msg)), t0 + 49ms);
  // A session alone is never held.
  one_round({1}, t0 + 50ms);
  BOOST_TEST(batcher.start(kGroup, t0 + 50ms).has_value());
}

BOOST_AUTO_TEST_CASE(a_batch_split_in_two_merges_again_and_parts_far_apart_do_not_hold_each_other) {
  using namespace std::chrono_literals;
  const StepBatcher::time_point t0{std::chrono::seconds(1)};
  Outcomes o;
  auto push = [&](StepBatcher& batcher, std::vector<int> seeds, StepBatcher::time_point at) {
    for (int s : seeds)
      batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 1, s), positions(1, 1), o.to(s), at);
  };
  auto run_now = [&](StepBatcher& batcher, StepBatcher::time_point at, StepBatcher::time_point done) -> size_t {
    auto b = batcher.start(kGroup, at);
    if (!b) return 0;
    const size_t n = b->msg.items.size();
    batcher.finish(b->id, run(std::move(b->msg)), done);
    return n;
  };
  {
    // {1, 2} ran at t0 and {3, 4} 5 ms later. Session 1 comes back 20 ms after its start: it waits for 2 (its own
    // batch) and for 3 and 4 (they ran after it, within its hold of 10 ms), and the four run as one batch.
    StepBatcher batcher(256, host());
    push(batcher, {1, 2}, t0);
    BOOST_TEST(run_now(batcher, t0, t0 + 5ms) == 2u);
    push(batcher, {3, 4}, t0 + 5ms);
    BOOST_TEST(run_now(batcher, t0 + 5ms, t0 + 10ms) == 2u);
    push(batcher, {1}, t0 + 20ms);
    push(batcher, {2}, t0 + 21ms);
    BOOST_TEST(run_now(batcher, t0 + 21ms, t0 + 21ms) == 0u);
    push(batcher, {3, 4}, t0 + 25ms);
    BOOST_TEST(run_now(batcher, t0 + 25ms, t0 + 30ms) == 4u);
  }
  {
    // 1 ran at t0 and 2 at t0 + 15 ms: 2 is further behind 1 than 1's hold, so 1 runs at once when it comes back (at
    // t0 + 20 ms); 2, back at t0 + 35 ms, has 1 5 ms behind it and waits for it, and from then on they run together.
    StepBatcher batcher(256, host());
    push(batcher, {1}, t0);
    BOOST_TEST(run_now(batcher, t0, t0 + 5ms) == 1u);
    push(batcher, {2}, t0 + 15ms);
    BOOST_TEST(run_now(batcher, t0 + 15ms, t0 + 18ms) == 1u);
    push(batcher, {1}, t0 + 20ms);
    BOOST_TEST(run_now(batcher, t0 + 20ms, t0 + 25ms) == 1u);
    push(batcher, {2}, t0 + 35ms);
    BOOST_TEST(run_now(batcher, t0 + 35ms, t0 + 35ms) == 0u);
    push(batcher, {1}, t0 + 40ms);
    BOOST_TEST(run_now(batcher, t0 + 40ms, t0 + 45ms) == 2u);
  }
}

// A hold is worth at most the batch it saves: a step waits no longer than its group's last batch took, however long
// the sessions' round trips (a swarm across continents: a hold of half of them would add to every step).
BOOST_AUTO_TEST_CASE(a_hold_lasts_no_longer_than_the_last_batch) {
  using namespace std::chrono_literals;
  const StepBatcher::time_point t0{std::chrono::seconds(1)};
  StepBatcher batcher(256, host());
  Outcomes o;
  for (int s = 1; s <= 2; ++s)
    batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 1, s), positions(1, 1), o.to(s), t0);
  auto b = batcher.start(kGroup, t0);
  BOOST_REQUIRE(b);
  batcher.finish(b->id, run(std::move(b->msg)), t0 + 1ms);  // a 1 ms batch
  batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1), o.to(1), t0 + 200ms);
  BOOST_TEST(!batcher.start(kGroup, t0 + 200ms));
  BOOST_REQUIRE(batcher.next_hold_end());
  BOOST_TEST((*batcher.next_hold_end() == t0 + 201ms));
  BOOST_TEST(batcher.start(kGroup, t0 + 201ms).has_value());
}

BOOST_AUTO_TEST_CASE(holds_are_bounded_and_batching_off_never_holds) {
  using namespace std::chrono_literals;
  const StepBatcher::time_point t0{std::chrono::seconds(1)};
  for (int64_t budget : {256, 0}) {
    StepBatcher batcher(budget, host());
    Outcomes o;
    for (int s = 1; s <= 2; ++s)
      batcher.push(kGroup, static_cast<uint64_t>(s), "", hidden(1, 1, s), positions(1, 1), o.to(s), t0);
    std::vector<StepBatcher::started> running;
    while (auto b = batcher.start(kGroup, t0)) running.push_back(std::move(*b));
    for (auto& b : running) batcher.finish(b.id, run(std::move(b.msg)), t0 + 10s);  // a very slow batch
    batcher.push(kGroup, 1, "", hidden(1, 1, 1), positions(1, 1), o.to(1), t0 + 11s);
    if (budget == 0) {
      BOOST_TEST(batcher.start(kGroup, t0 + 11s).has_value());
      continue;
    }
    BOOST_TEST(!batcher.start(kGroup, t0 + 11s));
    BOOST_TEST((*batcher.next_hold_end() == t0 + 11s + StepBatcher::kMaxHold));
    BOOST_TEST(batcher.start(kGroup, t0 + 11s + StepBatcher::kMaxHold).has_value());
  }
}
