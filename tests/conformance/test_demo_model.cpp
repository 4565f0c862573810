// The demo model (SmolLM2-135M-Instruct, Q4_1 GGUF) against transformers: the greedy answer to a fixed chat
// prompt, 32 tokens, token for token (tests/data/demo/golden.json from tools/make_demo_golden.py).
#define BOOST_TEST_MODULE demo_model
#define BOOST_TEST_NO_MAIN
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/local_model.hpp"
#include "model/model_path.hpp"
#include "support/skip_main.hpp"

using namespace corolla;

namespace {
std::string why_skip() {
  if (!std::filesystem::exists(demo_model_path()))
    return "the demo model is not downloaded (" + demo_model_path() + "); run tools/fetch_demo_model.sh";
  return {};
}

nlohmann::json golden() {
  std::ifstream in(std::string(COROLLA_TEST_DATA) + "/demo/golden.json");
  return nlohmann::json::parse(in);
}
}  // namespace

COROLLA_TEST_MAIN(why_skip)

BOOST_AUTO_TEST_CASE(greedy_answer_matches_transformers) {
  auto g = golden();
  auto backend = make_cpu_backend();
  LocalModel model(open_weights(demo_model_path()), *backend);
  BOOST_TEST(model.config().num_layers == 30);
  GenerationParams params;
  params.max_new_tokens = 32;
  params.stop_at_eos = false;
  auto prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  auto out = generate(model, prompt, params);
  auto want = g["greedy_ids"].get<std::vector<int32_t>>();
  BOOST_TEST(out == want, boost::test_tools::per_element());
}
