// Gradients through the blocks against torch autograd (tools/make_golden_grads.py): each block's backward, and a
// whole stack with deep prompts, within 1e-4 in fp32.
#define BOOST_TEST_MODULE golden_grads
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <numeric>

#include "model/block.hpp"
#include "model/local_model.hpp"
#include "model/train/local_training.hpp"
#include "model/train/span_training.hpp"
#include "support/golden.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

constexpr float kTol = 1e-4f;
const char* kModels[] = {"llama",      "mistral",    "qwen2",          "llama3-rope",
                         "qwen2-yarn", "llama-bias", "mistral-window", "qwen2-window",
                         "qwen3",      "mixtral",    "phi3",           "phi3-longrope",
                         "bloom",      "falcon",     "falcon-new",     "falcon-sequential",
                         "falcon2",    "gemma2",     "gemma2-options"};

Backend& backend() { return golden_backend(); }

struct Stack {
  std::shared_ptr<WeightSource> source;
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<Block*> ptrs;
  explicit Stack(const std::string& name) : source(open_weights(model_dir(name))) {
    for (int64_t i = 0; i < source->config().num_layers; ++i) {
      blocks.push_back(load_block(*source, i, backend()));
      ptrs.push_back(blocks.back().get());
    }
  }
};

// Positions 0..T-1 of every sequence of x [B, T, D].
std::vector<int32_t> positions_of(const Tensor& x) {
  std::vector<int32_t> p(static_cast<size_t>(x.dim(0) * x.dim(1)));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i % static_cast<size_t>(x.dim(1)));
  return p;
}

Tensor on_backend(const Tensor& host) {
  return backend().device() == Device::cpu ? host.clone() : backend().upload(host);
}

Tensor row(const Tensor& t, int64_t i) {
  Tensor r = t.slice_rows(i, i + 1);
  Shape s = t.rank() == 4 ? Shape{t.dim(1), t.dim(2), t.dim(3)} : Shape{t.dim(1), t.dim(2)};
  return r.reshaped(s);
}

}  // namespace

BOOST_DATA_TEST_CASE(block_backward_matches_autograd, bdata::make(kModels), name) {
  Stack stack(name);
  Golden g(name, "grads");
  const Tensor x = g.tensor("block_input"), dy = g.tensor("block_grad_output");
  const auto pos = positions_of(x);
  for (size_t l = 0; l < stack.blocks.size(); ++l) {
    Tensor h = on_backend(x);
    stack.blocks[l]->forward(h, pos, nullptr);
    BOOST_TEST(max_abs_diff(backend().download(h), row(g.tensor("block_outputs"), l)) < kTol, "block " << l);
    Tensor grad = on_backend(dy);
    stack.blocks[l]->backward(on_backend(x), pos, grad);
    const float err = max_abs_diff(backend().download(grad), row(g.tensor("block_grad_inputs"), l));
    BOOST_TEST(err < kTol, "block " << l << ": gradient differs by " << err);
  }
}

BOOST_DATA_TEST_CASE(stack_with_deep_prompts_matches_autograd, bdata::make(kModels), name) {
  Stack stack(name);
  Golden g(name, "grads");
  const Tensor x = g.tensor("block_input"), dy = g.tensor("block_grad_output"), prompts = g.tensor("span_prompts");
  const auto pos = positions_of(x);
  Tensor out = span_forward(stack.ptrs, x, pos, prompts, backend());
  BOOST_TEST(max_abs_diff(out, g.tensor("span_output")) < kTol);
  SpanGradients grads = span_backward(stack.ptrs, x, dy, pos, prompts, backend());
  const float err_in = max_abs_diff(grads.grad_in, g.tensor("span_grad_input"));
  const float err_p = max_abs_diff(grads.grad_prompts, g.tensor("span_grad_prompts"));
  BOOST_TEST(err_in < kTol, "input gradient differs by " << err_in << " (largest " << max_abs(grads.grad_in) << ")");
  BOOST_TEST(err_p < kTol, "prompt gradient differs by " << err_p);
  // The inputs are left as they were.
  BOOST_TEST(max_abs_diff(x, Golden(name, "grads").tensor("block_input")) == 0.f);
}

BOOST_AUTO_TEST_CASE(bad_prompts_are_named) {
  Stack stack("llama");
  Golden g("llama", "grads");
  const Tensor x = g.tensor("block_input");
  const auto pos = positions_of(x);
  auto fails_with = [&](const Tensor& prompts, const std::string& words) {
    try {
      span_forward(stack.ptrs, x, pos, prompts, backend());
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
      return;
    }
    BOOST_FAIL("no error for prompts " << prompts.describe());
  };
  fails_with(Tensor::empty(DType::f32, {3, 2, 4, 64}), "prompts for 3 blocks");
  fails_with(Tensor::empty(DType::f32, {4, 1, 4, 64}), "do not match the hidden states");
  fails_with(Tensor::empty(DType::f32, {4, 2, 13, 64}), "longer than the 12 tokens");
  fails_with(Tensor::empty(DType::f32, {4, 2, 64}), "prompts must be f32[blocks, batch, prompt_len, hidden]");
}

namespace {

TrainingBatch golden_batch(const Golden& g, bool labelled) {
  const auto ids = g.ids("train_ids");
  std::vector<TrainingExample> ex(2);
  for (size_t i = 0; i < 2; ++i) {
    ex[i].ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(i * 12),
                     ids.begin() + static_cast<std::ptrdiff_t>((i + 1) * 12));
    if (labelled) ex[i].label = static_cast<int32_t>(g.ids("cls_labels")[i]);
  }
  return make_batch(ex, 0);
}

Tensor param(const PromptTuning& t, const std::string& name, bool grad) {
  for (auto& [n, v] : grad ? t.gradients() : t.parameters())
    if (n == name) return v;
  BOOST_FAIL("no parameter " << name);
  return {};
}

}  // namespace

BOOST_DATA_TEST_CASE(deep_prompt_tuning_loss_and_gradients_match_autograd, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  auto head = std::make_shared<ClientHead>(*source, backend());
  LocalBlocks blocks(*source, backend());
  Golden g(name, "grads");
  PromptTuning tuning(head, tuning_options(TuningMode::deep_ptune, 4));
  tuning.set_parameters({{"prompts", g.tensor("ptune_prompts")}, {"deep_prompts", g.tensor("ptune_deep_prompts")}});
  const TrainingBatch batch = golden_batch(g, false);
  const BlockInputs in = tuning.inputs(batch);
  const HeadLoss loss =
      tuning.loss(batch, span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, backend()));
  BOOST_TEST(std::fabs(loss.loss - g.tensor("ptune_loss").data_as<float>()[0]) < kTol);
  SpanGradients grads = span_backward(blocks.blocks(), in.hidden, loss.grad, in.positions, in.prompts, backend());
  tuning.accumulate(batch, grads.grad_in, grads.grad_prompts);
  BOOST_TEST(max_abs_diff(param(tuning, "prompts", true), g.tensor("ptune_grad_prompts")) < kTol);
  BOOST_TEST(max_abs_diff(param(tuning, "deep_prompts", true), g.tensor("ptune_grad_deep_prompts")) < kTol);
}

BOOST_DATA_TEST_CASE(classifier_loss_and_gradients_match_autograd, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  auto head = std::make_shared<ClientHead>(*source, backend());
  LocalBlocks blocks(*source, backend());
  Golden g(name, "grads");
  PromptTuning tuning(head, tuning_options(TuningMode::ptune, 4, TrainingHead::classifier));
  tuning.set_parameters({{"prompts", g.tensor("ptune_prompts")}, {"score", g.tensor("cls_score")}});
  const TrainingBatch batch = golden_batch(g, true);
  const BlockInputs in = tuning.inputs(batch);
  BOOST_TEST(!has_prompts(in.prompts));
  const HeadLoss loss =
      tuning.loss(batch, span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, backend()));
  BOOST_TEST(std::fabs(loss.loss - g.tensor("cls_loss").data_as<float>()[0]) < kTol);
  SpanGradients grads = span_backward(blocks.blocks(), in.hidden, loss.grad, in.positions, in.prompts, backend());
  tuning.accumulate(batch, grads.grad_in, grads.grad_prompts);
  BOOST_TEST(max_abs_diff(param(tuning, "score", true), g.tensor("cls_grad_score")) < kTol);
  BOOST_TEST(max_abs_diff(param(tuning, "prompts", true), g.tensor("cls_grad_prompts")) < kTol);
}

BOOST_DATA_TEST_CASE(adam_steps_follow_torch, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  auto head = std::make_shared<ClientHead>(*source, backend());
  LocalBlocks blocks(*source, backend());
  Golden g(name, "grads");
  TuningOptions opt = tuning_options(TuningMode::deep_ptune, 4);
  opt.adam.lr = g.tensor("adam_lr").data_as<float>()[0];
  PromptTuning tuning(head, opt);
  tuning.set_parameters({{"prompts", g.tensor("ptune_prompts")}, {"deep_prompts", g.tensor("ptune_deep_prompts")}});
  const TrainingBatch batch = golden_batch(g, false);
  const Tensor want = g.tensor("adam_losses");
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double loss = local_train_step(tuning, blocks, batch);
    BOOST_TEST(std::fabs(loss - want.data_as<float>()[i]) < kTol, "step " << i << ": " << loss);
  }
  BOOST_TEST(tuning.steps() == want.numel());
  BOOST_TEST(max_abs_diff(param(tuning, "prompts", false), g.tensor("adam_prompts")) < kTol);
  BOOST_TEST(max_abs_diff(param(tuning, "deep_prompts", false), g.tensor("adam_deep_prompts")) < kTol);
}

// Generation with deep prompts goes through the KV cache (LocalModel::forward_hidden): it must equal the stateless
// forward of the same prompts and tokens.
BOOST_DATA_TEST_CASE(deep_prompts_through_the_cache_equal_the_stateless_forward, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  LocalModel model(source, backend());
  LocalBlocks blocks(*source, backend());
  Golden g(name, "grads");
  PromptTuning tuning(std::make_shared<ClientHead>(*source, backend()), tuning_options(TuningMode::deep_ptune, 4));
  tuning.set_parameters({{"prompts", g.tensor("ptune_prompts")}, {"deep_prompts", g.tensor("ptune_deep_prompts")}});
  const auto ids = g.ids("train_ids");
  std::vector<TrainingExample> one(1);
  one[0].ids.assign(ids.begin(), ids.begin() + 12);
  const TrainingBatch batch = make_batch(one, 0);
  const BlockInputs in = tuning.inputs(batch);
  const Tensor stateless =
      model.head().logits(on_backend(span_forward(blocks.blocks(), in.hidden, in.positions, in.prompts, backend())));
  model.reset(1, 64);
  const Tensor cached = model.forward_hidden(on_backend(in.hidden), in.positions, false, in.prompts);
  BOOST_TEST(max_abs_diff(cached, stateless) < kTol);
}
