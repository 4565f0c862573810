// LoRA adapters made and saved by Hugging Face PEFT (tools/make_golden_lora.py): logits and greedy tokens with
// each adapter, and gradients through the blocks with it, within 1e-4 of PEFT's in fp32. Bad adapters get errors
// that name the problem.
#define BOOST_TEST_MODULE golden_lora
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "model/local_model.hpp"
#include "model/lora.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "support/golden.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

constexpr float kTol = 1e-4f;
const char* kCases[] = {"llama/lora-attn", "llama/lora-mlp", "qwen2/lora-attn", "qwen2/lora-mlp"};

Backend& backend() { return golden_backend(); }

std::string model_of(const std::string& c) { return c.substr(0, c.find('/')); }
std::string adapter_dir(const std::string& c) {
  return model_dir(model_of(c)) + "/adapters/" + c.substr(c.find('/') + 1);
}

Tensor golden(const std::string& c, const std::string& name) {
  return SafetensorsFile::open(adapter_dir(c) + "/golden.safetensors")->tensor(name);
}

std::vector<int32_t> ids_of(const Tensor& t) {
  const auto* p = t.data_as<const int64_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

std::shared_ptr<const LoraAdapter> load_adapter(const std::string& c) {
  auto source = open_weights(model_dir(model_of(c)));
  return LoraAdapter::load(adapter_dir(c), source->config(), 0, source->config().num_layers, backend());
}

}  // namespace

BOOST_DATA_TEST_CASE(logits_and_greedy_tokens_match_peft, bdata::make(kCases), c) {
  LocalModel model(open_weights(model_dir(model_of(c))), backend());
  auto adapter = load_adapter(c);
  const std::string name = c;
  BOOST_TEST(adapter->name() == name.substr(name.find('/') + 1));
  const auto ids = ids_of(golden(c, "input_ids"));
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  // Without the adapter the logits differ clearly; with it they match PEFT's.
  model.reset(1, 64);
  const float without = max_abs_diff(model.forward(ids, pos, false), golden(c, "logits_full"));
  BOOST_TEST(without > 0.05f);
  model.set_adapter(adapter);
  model.reset(1, 64);
  BOOST_TEST(max_abs_diff(model.forward(ids, pos, false), golden(c, "logits_full")) < kTol);
  GenerationParams params;
  params.max_new_tokens = 16;
  params.stop_at_eos = false;
  BOOST_TEST(generate(model, ids, params) == ids_of(golden(c, "greedy_ids")), boost::test_tools::per_element());
}

BOOST_DATA_TEST_CASE(gradients_through_an_adapter_match_autograd, bdata::make(kCases), c) {
  auto source = open_weights(model_dir(model_of(c)));
  LocalBlocks blocks(*source, backend());
  auto adapter = load_adapter(c);
  const Tensor x = golden(c, "block_input"), dy = golden(c, "block_grad_output"), prompts = golden(c, "span_prompts");
  std::vector<int32_t> pos(static_cast<size_t>(x.dim(0) * x.dim(1)));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i % static_cast<size_t>(x.dim(1)));
  BOOST_TEST(max_abs_diff(span_forward(blocks.blocks(), x, pos, prompts, backend(), adapter.get()),
                          golden(c, "span_output")) < kTol);
  SpanGradients g = span_backward(blocks.blocks(), x, dy, pos, prompts, backend(), adapter.get());
  BOOST_TEST(max_abs_diff(g.grad_in, golden(c, "span_grad_input")) < kTol);
  BOOST_TEST(max_abs_diff(g.grad_prompts, golden(c, "span_grad_prompts")) < kTol);
}

BOOST_AUTO_TEST_CASE(an_adapter_loaded_for_a_span_leaves_other_blocks_alone) {
  auto source = open_weights(model_dir("llama"));
  auto adapter = LoraAdapter::load(adapter_dir("llama/lora-attn"), source->config(), 1, 3, backend());
  BOOST_TEST(!adapter->block(0));
  BOOST_TEST(adapter->block(1));
  BOOST_TEST(adapter->block(2));
  BOOST_TEST(!adapter->block(3));
  BOOST_TEST(adapter->rank() == 4);
  BOOST_TEST(adapter->scale() == 2.f);
}

BOOST_AUTO_TEST_CASE(unsupported_or_broken_adapters_are_refused_by_name) {
  auto source = open_weights(model_dir("llama"));
  const auto& config = source->config();
  TempDir dir;
  namespace fs = std::filesystem;
  auto variant = [&](const std::string& name, const std::string& from, const std::string& to) {
    const fs::path d = dir.path / name;
    fs::create_directories(d);
    fs::copy_file(adapter_dir("llama/lora-attn") + "/adapter_model.safetensors", d / "adapter_model.safetensors");
    std::ifstream in(adapter_dir("llama/lora-attn") + "/adapter_config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!from.empty()) {
      const auto at = text.find(from);
      BOOST_REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
    }
    std::ofstream(d / "adapter_config.json") << text;
    return d.string();
  };
  auto refused = [&](const std::string& path, const std::string& words) {
    try {
      LoraAdapter::load(path, config, 0, 4, backend());
    } catch (const std::runtime_error& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
      return;
    }
    BOOST_FAIL("no error for " << path);
  };
  refused(variant("dora", "\"use_dora\": false", "\"use_dora\": true"), "DoRA");
  refused(variant("bias", "\"bias\": \"none\"", "\"bias\": \"all\""), "bias 'all'");
  refused(variant("regex", "\"target_modules\": [", "\"target_modules\": \".*proj\", \"unused\": ["),
          "regular expression");
  refused(dir.str() + "/missing", "no adapter_config.json");
  // An adapter made for another model: its pairs do not fit that model's projections.
  auto other = open_weights(model_dir("llama3-rope"));
  try {
    LoraAdapter::load(adapter_dir("llama/lora-attn"), other->config(), 0, 2, backend());
    BOOST_FAIL("an adapter for another model was accepted");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    BOOST_TEST(
        (what.find("do not fit the projection") != std::string::npos || what.find("names block") != std::string::npos),
        what);
  }
}
