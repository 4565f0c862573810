// Beam search against transformers' generate(num_beams=..., do_sample=False) on the golden models
// (tools/make_beam_golden.py wrote the references): beam counts, length penalties, early_stopping true, false and
// "never", with and without end tokens; and what it refuses.
#define BOOST_TEST_MODULE beam_search
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/local_model.hpp"
#include "support/golden.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

EarlyStopping early_stopping(const std::string& s) {
  if (s == "true") return EarlyStopping::on_full;
  if (s == "never") return EarlyStopping::never;
  return EarlyStopping::heuristic;
}

}  // namespace

BOOST_DATA_TEST_CASE(beam_search_returns_what_transformers_returns, bdata::make({"llama", "mistral-window"}), name) {
  std::ifstream in(model_dir(name) + "/beam_search.json");
  BOOST_REQUIRE(in);
  const auto ref = nlohmann::json::parse(in);
  const auto prompt = ref.at("prompt").get<std::vector<int32_t>>();
  LocalModel local(open_weights(model_dir(name)), golden_backend());
  for (const auto& c : ref.at("cases")) {
    GenerationParams params;
    params.num_beams = c.at("num_beams").get<int64_t>();
    params.max_new_tokens = c.at("max_new_tokens").get<int64_t>();
    params.length_penalty = c.at("length_penalty").get<double>();
    params.early_stopping = early_stopping(c.at("early_stopping").get<std::string>());
    params.eos_token_ids = c.at("eos").get<std::vector<int32_t>>();
    params.stop_at_eos = !params.eos_token_ids.empty();
    const auto want = c.at("tokens").get<std::vector<int32_t>>();
    BOOST_TEST(generate(local, prompt, params) == want, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(beam_search_refuses_what_it_cannot_run) {
  GenerationParams sampled;
  sampled.num_beams = 4;
  sampled.sampling.greedy = false;
  BOOST_TEST(!generation_problem(sampled).empty());
  GenerationParams penalised;
  penalised.num_beams = 4;
  penalised.sampling.repetition_penalty = 1.2f;
  BOOST_TEST(!generation_problem(penalised).empty());
  GenerationParams too_many;
  too_many.num_beams = 65;
  BOOST_TEST(!generation_problem(too_many).empty());
  GenerationParams fine;
  fine.num_beams = 4;
  BOOST_TEST(generation_problem(fine).empty());
}
