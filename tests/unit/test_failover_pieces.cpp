// The plain pieces behind session failover: the reputation book (bans with exponential backoff, persistence,
// penalties), the merging of a span's history into replay steps, and the pieces of spot checks.
#define BOOST_TEST_MODULE failover_pieces
#include <boost/test/unit_test.hpp>
#include <numeric>

#include "actors/client/reputation_book.hpp"
#include "actors/client/session_history.hpp"
#include "actors/client/spot_check.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
using namespace std::chrono_literals;

namespace {

history_entry entry(int64_t batch, int64_t tokens, int64_t hidden, int32_t first_position, float base) {
  history_entry e{Tensor::empty(DType::f32, {batch, tokens, hidden}), {}};
  float* p = e.hidden.data_as<float>();
  for (int64_t i = 0; i < e.hidden.numel(); ++i) p[i] = base + static_cast<float>(i);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t) e.positions.push_back(first_position + static_cast<int32_t>(t));
  return e;
}

}  // namespace

BOOST_AUTO_TEST_CASE(bans_double_with_each_failure_in_a_row_and_reset_after_a_success) {
  ReputationBook book(ban_policy{15s, 60s});
  const int64_t t = 1'000'000;
  BOOST_TEST(!book.banned("a", t));
  BOOST_TEST(book.record_failure("a", t).count() == 15'000);
  BOOST_TEST(book.banned("a", t + 14'999));
  BOOST_TEST(!book.banned("a", t + 15'000));
  BOOST_TEST(book.record_failure("a", t + 20'000).count() == 30'000);
  BOOST_TEST(book.record_failure("a", t + 60'000).count() == 60'000);
  BOOST_TEST(book.record_failure("a", t + 130'000).count() == 60'000);  // capped
  BOOST_TEST((book.banned_peers(t + 130'000) == std::set<std::string>{"a"}));
  book.record_success("a", 10);
  BOOST_TEST(book.record_failure("a", t + 300'000).count() == 15'000);  // the streak was broken
  BOOST_TEST(book.get("a")->failures == 5u);
  BOOST_TEST(book.get("a")->successes == 1u);
}

BOOST_AUTO_TEST_CASE(latency_is_smoothed_and_unreliable_peers_cost_more) {
  ReputationBook book;
  book.record_success("fast", 10);
  book.record_success("fast", 20);
  BOOST_TEST(book.get("fast")->latency_ewma_ms == 12.0, boost::test_tools::tolerance(1e-9));
  for (int i = 0; i < 8; ++i) book.record_success("flaky", 10);
  book.record_failure("flaky", 0);
  book.record_failure("flaky", 0);
  BOOST_TEST(book.penalty_seconds("flaky") > book.penalty_seconds("fast"));
  BOOST_TEST(book.penalty_seconds("fast") > 0.0);                                 // a small prior, never zero
  BOOST_TEST(book.penalty_seconds("never-seen") > book.penalty_seconds("fast"));  // little evidence either way
  BOOST_TEST(book.penalties().count("flaky") == 1u);
}

BOOST_AUTO_TEST_CASE(reputations_and_bans_survive_a_restart) {
  TempDir dir;
  const int64_t t = ReputationBook::now_ms();
  {
    ReputationBook book({}, std::make_shared<NodeStore>(dir.str()));
    book.record_success("127.0.0.1:5000", 7);
    book.record_failure("127.0.0.1:6000", t);  // written at once
    book.flush();
  }
  ReputationBook again({}, std::make_shared<NodeStore>(dir.str()));
  BOOST_TEST(again.banned("127.0.0.1:6000", t + 1));
  BOOST_TEST(!again.banned("127.0.0.1:5000", t + 1));
  BOOST_TEST(again.get("127.0.0.1:5000")->successes == 1u);
  BOOST_TEST(again.get("127.0.0.1:6000")->consecutive_failures == 1u);
  // The next failure continues the streak the previous process started.
  BOOST_TEST(again.record_failure("127.0.0.1:6000", t + 20'000).count() == 30'000);
}

BOOST_AUTO_TEST_CASE(consecutive_steps_merge_into_one_replay_step) {
  // A prompt of 5 tokens, then 3 single-token steps: one replay step of 8 tokens, values in order.
  std::vector<history_entry> h{entry(1, 5, 4, 0, 0), entry(1, 1, 4, 5, 100), entry(1, 1, 4, 6, 200),
                               entry(1, 1, 4, 7, 300)};
  auto merged = merge_for_replay(h);
  BOOST_REQUIRE(merged.size() == 1u);
  BOOST_TEST(merged[0].hidden.dim(1) == 8);
  std::vector<int32_t> want(8);
  std::iota(want.begin(), want.end(), 0);
  BOOST_TEST(merged[0].positions == want, boost::test_tools::per_element());
  const float* p = merged[0].hidden.data_as<const float>();
  BOOST_TEST(p[0] == 0.f);
  BOOST_TEST(p[19] == 19.f);   // the prompt's last value
  BOOST_TEST(p[20] == 100.f);  // the first decode step
  BOOST_TEST(p[31] == 303.f);
}

BOOST_AUTO_TEST_CASE(a_step_that_goes_back_starts_a_new_replay_step) {
  // Positions 0..3, then 2..3 again (a rewrite of the cache), then 4: [0..3], [2..4].
  std::vector<history_entry> h{entry(1, 4, 2, 0, 0), entry(1, 2, 2, 2, 50), entry(1, 1, 2, 4, 90)};
  auto merged = merge_for_replay(h);
  BOOST_REQUIRE(merged.size() == 2u);
  BOOST_TEST(merged[0].hidden.dim(1) == 4);
  BOOST_TEST((merged[1].positions == std::vector<int32_t>{2, 3, 4}));
  BOOST_TEST(merged[1].hidden.data_as<const float>()[4] == 90.f);
}

BOOST_AUTO_TEST_CASE(batched_steps_merge_sequence_by_sequence) {
  // Two sequences: 2 tokens each, then 1 each. Sequence 1's rows follow sequence 0's in the merged tensor.
  std::vector<history_entry> h{entry(2, 2, 1, 0, 0), entry(2, 1, 1, 2, 10)};
  auto merged = merge_for_replay(h);
  BOOST_REQUIRE(merged.size() == 1u);
  const float* p = merged[0].hidden.data_as<const float>();
  BOOST_TEST((std::vector<float>(p, p + 6) == std::vector<float>{0, 1, 10, 2, 3, 11}));
  BOOST_TEST((merged[0].positions == std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

// Beam search: after a step with hypothesis ids {1, 1}, both sequences' histories are the second's (what the
// servers' caches then hold, and what a replacement must be given to rebuild them).
BOOST_AUTO_TEST_CASE(hypothesis_ids_reorder_the_history_sequence_by_sequence) {
  std::vector<history_entry> h{entry(2, 2, 1, 0, 0), entry(2, 1, 1, 2, 10)};
  const float* before = h[0].hidden.data_as<const float>();
  const std::vector<float> second(before + 2, before + 4);
  reorder_sequences(h, {1, 1});
  const float* p = h[0].hidden.data_as<const float>();
  BOOST_TEST((std::vector<float>(p, p + 4) == std::vector<float>{second[0], second[1], second[0], second[1]}));
  p = h[1].hidden.data_as<const float>();
  BOOST_TEST(p[0] == p[1]);
  auto merged = merge_for_replay(h);
  BOOST_REQUIRE(merged.size() == 1u);
  BOOST_TEST((merged[0].positions == std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
}

BOOST_AUTO_TEST_CASE(a_span_history_becomes_one_verification_forward_from_position_zero) {
  std::vector<history_entry> h{entry(1, 5, 4, 0, 0), entry(1, 1, 4, 5, 100)};
  auto input = verification_input(h, entry(1, 1, 4, 6, 200));
  BOOST_REQUIRE(input.has_value());
  BOOST_TEST(input->hidden.dim(1) == 7);
  BOOST_TEST(input->positions.back() == 6);
  BOOST_TEST(input->hidden.data_as<const float>()[24] == 200.f);
  // The step's outputs are the last tokens of the verifier's.
  Tensor last = last_tokens(input->hidden, 1);
  BOOST_TEST(last.dim(1) == 1);
  BOOST_TEST(last.data_as<const float>()[0] == 200.f);
  // A history that went back (rewrote its cache) is not one forward: no check.
  std::vector<history_entry> back{entry(1, 4, 4, 0, 0), entry(1, 2, 4, 2, 50)};
  BOOST_TEST(!verification_input(back, entry(1, 1, 4, 4, 90)).has_value());
}

BOOST_AUTO_TEST_CASE(outputs_agree_within_the_coarser_dtypes_tolerance) {
  Tensor want = Tensor::empty(DType::f32, {1, 2, 4});
  Tensor got = Tensor::empty(DType::f32, {1, 2, 4});
  for (int64_t i = 0; i < 8; ++i) {
    want.data_as<float>()[i] = 1.f + static_cast<float>(i);
    got.data_as<float>()[i] = want.data_as<float>()[i] * 1.0001f;
  }
  BOOST_TEST(compare_outputs(got, want, output_tolerance("f32", "f32")).empty());
  got.data_as<float>()[3] += 1.f;  // a wrong value: 1 in a norm of ~14
  BOOST_TEST(!compare_outputs(got, want, output_tolerance("f32", "f32")).empty());
  BOOST_TEST(compare_outputs(got, want, output_tolerance("f32", "q4_0")).empty());  // 4-bit rounding hides it
  got.data_as<float>()[3] = std::nanf("");
  BOOST_TEST(compare_outputs(got, want, 1e9).find("holds nan") != std::string::npos);
  BOOST_TEST(!compare_outputs(last_tokens(got, 1), want, 1).empty());  // shapes differ
}

// A hop, or a verifier, whose KV cache is f16 is judged with f16's tolerance, whatever its weights' dtype.
BOOST_AUTO_TEST_CASE(an_f16_kv_cache_loosens_a_checks_tolerance_to_f16s) {
  planned_hop hop{"a:1", 0, 2, "", "f32", "f32"}, verifier{"b:1", 0, 2, "", "f32", ""};
  BOOST_TEST(tolerance_for(hop, {verifier}) == output_tolerance("f32", "f32"));
  hop.kv_dtype = "f16";
  BOOST_TEST(tolerance_for(hop, {verifier}) == output_tolerance("f16", "f16"));
  hop.kv_dtype = "f32";
  verifier.kv_dtype = "f16";
  BOOST_TEST(tolerance_for(hop, {verifier}) == output_tolerance("f16", "f16"));
  hop.dtype = "q4_0";  // a coarser dtype still rules
  BOOST_TEST(tolerance_for(hop, {verifier}) == output_tolerance("q4_0", "q4_0"));
}

BOOST_AUTO_TEST_CASE(new_servers_are_always_checked_and_each_hop_one_step_in_every) {
  std::mt19937_64 rng(1);
  spot_check_options o;
  o.every = 1 << 20;
  BOOST_TEST((hops_to_check(o, {false, true, true}, rng) == std::vector<size_t>{1, 2}));
  o.every = 4;
  int checked[2] = {0, 0};
  for (int i = 0; i < 4000; ++i)
    for (size_t k : hops_to_check(o, {false, false}, rng)) ++checked[k];
  for (int c : checked) {
    BOOST_TEST(c > 850);
    BOOST_TEST(c < 1150);
  }
  o.every = 0;  // off: not even new servers
  BOOST_TEST(hops_to_check(o, {true}, rng).empty());
  o.every = 1;  // every hop of every step
  o.new_servers = false;
  BOOST_TEST((hops_to_check(o, {false, false, false}, rng) == std::vector<size_t>{0, 1, 2}));
}
