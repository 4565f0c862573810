#define BOOST_TEST_MODULE generation
#include <boost/test/unit_test.hpp>
#include <stdexcept>
#include <vector>

#include "model/generation.hpp"

using namespace corolla;

namespace {

constexpr int64_t kVocab = 8;

// Logits whose largest entry is `id` (greedy sampling chooses it).
Tensor logits_choosing(int32_t id) {
  Tensor t = Tensor::empty(DType::f32, {1, kVocab});
  for (int64_t v = 0; v < kVocab; ++v) t.data_as<float>()[v] = v == id ? 2.0f : 0.0f;
  return t;
}

GenerationParams greedy(int64_t max_new_tokens) {
  GenerationParams p;
  p.max_new_tokens = max_new_tokens;
  return p;
}

// A model that answers each token t with logits choosing t + 1: a generation from logits choosing 0 counts up.
struct CountingModel {
  std::vector<int32_t> fed;
  Tensor feed(int32_t id) {
    fed.push_back(id);
    return logits_choosing((id + 1) % kVocab);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(ends_at_max_new_tokens_without_feeding_the_last) {
  CountingModel model;
  TokenGeneration g(greedy(4), {}, {});
  run_generation(g, logits_choosing(0), [&](int32_t id) { return model.feed(id); });
  BOOST_TEST(g.tokens() == std::vector<int32_t>({0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(model.fed == std::vector<int32_t>({0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(to_string(g.end()) == std::string("length"));
}

BOOST_AUTO_TEST_CASE(ends_at_an_end_token_which_it_keeps) {
  CountingModel model;
  TokenGeneration g(greedy(100), {5, 3}, {});
  run_generation(g, logits_choosing(0), [&](int32_t id) { return model.feed(id); });
  BOOST_TEST(g.tokens() == std::vector<int32_t>({0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(model.fed.size() == 3u);
  BOOST_TEST(to_string(g.end()) == std::string("end_token"));
}

BOOST_AUTO_TEST_CASE(the_callback_sees_every_token_and_can_stop_after_any) {
  CountingModel model;
  std::vector<int32_t> seen;
  TokenGeneration g(greedy(100), {}, {}, [&](int32_t id) {
    seen.push_back(id);
    return id != 2;
  });
  run_generation(g, logits_choosing(0), [&](int32_t id) { return model.feed(id); });
  BOOST_TEST(seen == std::vector<int32_t>({0, 1, 2}), boost::test_tools::per_element());
  BOOST_TEST(g.tokens() == seen, boost::test_tools::per_element());
  BOOST_TEST(to_string(g.end()) == std::string("stopped"));
}

// A stop sequence that ends on an end token, or on the last token allowed, is still the caller's stop.
BOOST_AUTO_TEST_CASE(the_callback_has_the_last_word) {
  for (const auto& [max_new, ends] : std::vector<std::pair<int64_t, std::vector<int32_t>>>{{100, {1}}, {2, {}}}) {
    CountingModel model;
    TokenGeneration g(greedy(max_new), ends, {}, [](int32_t id) { return id != 1; });
    run_generation(g, logits_choosing(0), [&](int32_t id) { return model.feed(id); });
    BOOST_TEST(g.tokens().size() == 2u);
    BOOST_TEST(to_string(g.end()) == std::string("stopped"));
  }
}

// The repetition penalty reads the history the generation started from and the tokens it chose since.
BOOST_AUTO_TEST_CASE(the_repetition_penalty_counts_the_history_and_the_new_tokens) {
  GenerationParams p = greedy(2);
  p.sampling.repetition_penalty = 100.0f;
  Tensor flat = Tensor::empty(DType::f32, {1, 4});
  for (int v = 0; v < 4; ++v) flat.data_as<float>()[v] = 1.0f + 0.1f * static_cast<float>(3 - v);  // 0 largest
  TokenGeneration g(p, {}, {0});
  run_generation(g, flat, [&](int32_t) { return flat; });
  BOOST_TEST(g.tokens() == std::vector<int32_t>({1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(refuses_what_cannot_run) {
  BOOST_CHECK_THROW(TokenGeneration(greedy(0), {}, {}), std::invalid_argument);
  GenerationParams beams = greedy(4);
  beams.num_beams = 2;
  BOOST_CHECK_THROW(TokenGeneration(beams, {}, {}), std::invalid_argument);
  GenerationParams hot = greedy(4);
  hot.sampling.greedy = false;
  hot.sampling.temperature = 0.0f;
  BOOST_CHECK_THROW(TokenGeneration(hot, {}, {}), std::invalid_argument);
  TokenGeneration one(greedy(1), {}, {});
  const Tensor l = logits_choosing(3);
  BOOST_TEST(!one.advance({l.data_as<const float>(), kVocab}));
  BOOST_CHECK_THROW(one.advance({l.data_as<const float>(), kVocab}), std::logic_error);
}

// A search that chose its tokens at once hands them over in the same order of ends as a token-by-token one.
BOOST_AUTO_TEST_CASE(handing_over_finished_tokens_ends_as_a_generation_does) {
  std::vector<int32_t> seen;
  auto until = [&](int32_t stop) {
    return [&, stop](int32_t id) {
      seen.push_back(id);
      return id != stop;
    };
  };
  BOOST_TEST(to_string(hand_over({4, 5, 6}, {6}, until(-1))) == std::string("end_token"));
  BOOST_TEST(seen == std::vector<int32_t>({4, 5, 6}), boost::test_tools::per_element());
  seen.clear();
  BOOST_TEST(to_string(hand_over({4, 5, 6}, {6}, until(5))) == std::string("stopped"));
  BOOST_TEST(seen == std::vector<int32_t>({4, 5}), boost::test_tools::per_element());
  BOOST_TEST(to_string(hand_over({4, 5, 6}, {9}, {})) == std::string("length"));
}
