// Block::forward_batch, which runs several sessions' steps through a block at once (continuous batching in the
// servers), against each step run alone: the same outputs within fp32 rounding and the same KV caches, for every
// architecture of the golden models: decode rows, prefill chunks, several sequences in one session, the stateless
// forward, sliding windows, longrope's frequency switch and mixtures of experts in one batch; and sessions with
// different LoRA adapters in one batch. The batched sessions' caches are pages scattered over one pool, as a
// server's are; each step alone has a contiguous cache of its own.
#define BOOST_TEST_MODULE batched_forward
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>

#include "model/arch/attention_runs.hpp"
#include "model/block.hpp"
#include "model/lora.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"

using namespace corolla;
using namespace corolla::test;
namespace bdata = boost::unit_test::data;

namespace {

// The tolerance of the golden tests: a batch of M rows may take another matrix kernel than one of M_i rows, which
// sums in another order.
constexpr float kTol = 1e-4f;

const auto& kModels = kGoldenModels;

Backend& backend() { return golden_backend(); }

Tensor random_hidden(std::mt19937& rng, int64_t b, int64_t t, int64_t d) {
  Tensor h = Tensor::empty(DType::f32, {b, t, d});
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < h.numel(); ++i) h.data_as<float>()[i] = normal(rng);
  return h;
}

// One session's step: b sequences of the given positions each (the same for every sequence).
struct Step {
  int64_t b = 1;
  std::vector<int32_t> one;  // positions of one sequence
  bool cached = true;
  const BlockLora* lora = nullptr;  // the session's adapter
  std::vector<int32_t> positions() const {
    std::vector<int32_t> all;
    for (int64_t i = 0; i < b; ++i) all.insert(all.end(), one.begin(), one.end());
    return all;
  }
  int64_t t() const { return static_cast<int64_t>(one.size()); }
};

std::vector<int32_t> range(int32_t from, int32_t to) {
  std::vector<int32_t> p(static_cast<size_t>(to - from));
  std::iota(p.begin(), p.end(), from);
  return p;
}

// A cache's keys (or values) slot by slot, [batch, max_length, Hkv·Dh] on the host, wherever its pages lie.
Tensor cache_slots(const KVCache& cache, bool values) {
  const KvPages pages = cache.pages();
  const Tensor pool = backend().download(values ? pages.v : pages.k);
  const int64_t row = pool.dim(2) * pool.dim(3);
  Tensor out = Tensor::empty(DType::f32, {cache.batch(), cache.max_length(), row});
  for (int64_t b = 0; b < cache.batch(); ++b)
    for (int64_t s = 0; s < cache.max_length(); ++s)
      std::copy_n(pool.data_as<const float>() + pages.row(b, s) * row, row,
                  out.data_as<float>() + (b * cache.max_length() + s) * row);
  return out;
}

// Caches as a server's sessions get them: pages of 8 tokens from one pool of the block, handed out after other
// caches came and went, so that each cache's pages are scattered and out of order; at a block whose attention
// slides, rings of its window (which take a prompt longer than the ring in pieces).
std::vector<KVCache> pooled_caches(const Block& block, const std::vector<int64_t>& batches,
                                   const std::vector<int64_t>& max_lengths) {
  auto pool = block.make_pool(64, 8);
  std::vector<KVCache> holes;
  for (int i = 0; i < 12; ++i) holes.push_back(std::move(*KVCache::take(pool, 1, 8 * (1 + i % 3))));
  std::vector<KVCache> out;
  for (size_t i = 0; i < holes.size(); i += 2) holes[i] = KVCache();  // every other one given back
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t b = batches[i], max_length = max_lengths[i];
    auto cache = KVCache::take(pool, b, max_length, block.kv_window());
    BOOST_REQUIRE(cache);
    // A ring holds the window and a page less one, in whole pages of 8.
    if (block.kv_window() > 0) BOOST_TEST(cache->pages().ring == ((block.kv_window() + 7 + 7) / 8 * 8 < max_length));
    out.push_back(std::move(*cache));
  }
  return out;
}
std::vector<KVCache> pooled_caches(const Block& block, const std::vector<int64_t>& batches, int64_t max_length) {
  return pooled_caches(block, batches, std::vector<int64_t>(batches.size(), max_length));
}

// The segments of `steps` side by side in one batch, at `positions` (one entry per step), with `caches`.
std::vector<BlockSegment> segments_of(const std::vector<Step>& steps,
                                      const std::vector<std::vector<int32_t>>& positions,
                                      std::vector<KVCache>& caches) {
  std::vector<BlockSegment> segments;
  int64_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    segments.push_back({.row = row,
                        .batch = steps[i].b,
                        .tokens = steps[i].t(),
                        .positions = positions[i],
                        .cache = steps[i].cached ? &caches[i] : nullptr,
                        .lora = steps[i].lora});
    row += steps[i].b * steps[i].t();
  }
  return segments;
}

// Runs `steps` (one per session) through `block`: alone, each with its own cache, and batched, with a second set
// of caches; the outputs and caches must agree.
void check_round(Block& block, const std::vector<Step>& steps, std::vector<KVCache>& alone_caches,
                 std::vector<KVCache>& batch_caches, std::mt19937& rng, int64_t d, const std::string& what) {
  std::vector<Tensor> inputs, alone;
  int64_t rows = 0;
  for (const Step& s : steps) {
    inputs.push_back(random_hidden(rng, s.b, s.t(), d));
    rows += s.b * s.t();
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    Tensor h = backend().upload(inputs[i].clone());
    block.forward(h, steps[i].positions(), steps[i].cached ? &alone_caches[i] : nullptr, steps[i].lora);
    alone.push_back(backend().download(h).clone());
  }
  Tensor all = Tensor::empty(DType::f32, {rows, d});
  std::vector<std::vector<int32_t>> positions;
  int64_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::copy_n(inputs[i].data_as<const float>(), inputs[i].numel(), all.data_as<float>() + row * d);
    positions.push_back(steps[i].positions());
    row += steps[i].b * steps[i].t();
  }
  const std::vector<BlockSegment> segments = segments_of(steps, positions, batch_caches);
  Tensor dev = backend().upload(all.clone());
  block.forward_batch(dev, segments);
  const Tensor out = backend().download(dev);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Tensor mine = out.slice_rows(segments[i].row, segments[i].row + segments[i].rows());
    BOOST_TEST(max_abs_diff(mine, alone[i]) < kTol,
               what << ": session " << i << " differs by " << max_abs_diff(mine, alone[i]));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    // (A ring holds only the latest positions: what it holds shows in the next round's outputs.)
    if (!steps[i].cached || batch_caches[i].pages().ring) continue;
    BOOST_TEST(max_abs_diff(cache_slots(alone_caches[i], false), cache_slots(batch_caches[i], false)) < kTol,
               what << ": keys of session " << i);
    BOOST_TEST(max_abs_diff(cache_slots(alone_caches[i], true), cache_slots(batch_caches[i], true)) < kTol,
               what << ": values of session " << i);
  }
}

}  // namespace

BOOST_DATA_TEST_CASE(a_batch_of_sessions_computes_what_each_computes_alone, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  const ModelConfig& c = source->config();
  std::mt19937 rng(7);
  // Long enough to pass the windows of the windowed goldens and longrope's original context where it is short.
  const int32_t long_prompt = static_cast<int32_t>(std::min<int64_t>(40, c.max_position - 2));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::unique_ptr<Block> block = load_block(*source, l, backend());
    const int64_t max_len = long_prompt + 2;
    std::vector<KVCache> alone;
    for (int64_t batch : {1, 1, 2, 1}) alone.push_back(block->make_cache(batch, max_len));
    std::vector<KVCache> batched = pooled_caches(*block, {1, 1, 2, 1}, max_len);
    const std::string where = std::string(name) + " block " + std::to_string(l);
    // Prompts of different lengths, a session of two sequences, and a stateless forward, in one batch.
    check_round(*block, {{1, range(0, long_prompt)}, {1, range(0, 3)}, {2, range(0, 2)}, {1, range(0, 4), false}},
                alone, batched, rng, c.hidden_size, where + ", prompts");
    // Decode steps beside the next chunk of a prompt.
    check_round(*block, {{1, range(long_prompt, long_prompt + 1)}, {1, range(3, 9)}, {2, range(2, 3)}}, alone, batched,
                rng, c.hidden_size, where + ", decode and a chunk");
  }
}

// Adjacent decode steps of sessions whose caches differ in length (page tables of different widths, pages scattered
// over the pool) share one attention call (model/arch/attention_runs.hpp); a prompt's chunk between them, or a
// ring's cache, runs alone. Each session's output and cache are what it computes alone.
BOOST_DATA_TEST_CASE(adjacent_decode_steps_share_one_attention_call, bdata::make(kModels), name) {
  auto source = open_weights(model_dir(name));
  const ModelConfig& c = source->config();
  std::mt19937 rng(5);
  const int32_t longest = static_cast<int32_t>(std::min<int64_t>(40, c.max_position - 4));
  const std::vector<int32_t> prompts = {3, longest, 9, 17, 5};
  const std::vector<int64_t> batches = {1, 1, 2, 1, 1};
  std::vector<int64_t> lengths;
  for (int32_t p : prompts) lengths.push_back(p + 3);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::unique_ptr<Block> block = load_block(*source, l, backend());
    std::vector<KVCache> alone;
    for (size_t i = 0; i < prompts.size(); ++i) alone.push_back(block->make_cache(batches[i], lengths[i]));
    std::vector<KVCache> batched = pooled_caches(*block, batches, lengths);
    const bool rings = std::any_of(batched.begin(), batched.end(), [](const KVCache& k) { return k.pages().ring; });
    const std::string where = std::string(name) + " block " + std::to_string(l);
    auto runs = [&](const std::vector<Step>& steps) {
      std::vector<std::vector<int32_t>> positions;
      for (const Step& s : steps) positions.push_back(s.positions());
      const std::vector<BlockSegment> segments = segments_of(steps, positions, batched);
      return AttentionRuns(*block, segments).size();
    };
    std::vector<Step> steps;
    for (size_t i = 0; i < prompts.size(); ++i) steps.push_back({batches[i], range(0, prompts[i])});
    check_round(*block, steps, alone, batched, rng, c.hidden_size, where + ", prompts");
    // Every session's next token: one run.
    for (size_t i = 0; i < prompts.size(); ++i) steps[i].one = range(prompts[i], prompts[i] + 1);
    if (!rings) BOOST_TEST(runs(steps) == 1u, where);
    check_round(*block, steps, alone, batched, rng, c.hidden_size, where + ", decode");
    // Two tokens of the third session between the others' next ones: three runs.
    for (size_t i = 0; i < prompts.size(); ++i) steps[i].one = range(prompts[i] + 1, prompts[i] + (i == 2 ? 3 : 2));
    if (!rings) BOOST_TEST(runs(steps) == 3u, where);
    check_round(*block, steps, alone, batched, rng, c.hidden_size, where + ", decode around a chunk");
  }
}

// Sessions with different LoRA adapters (PEFT's, tests/data/models/*/adapters) and none share a batch: each
// segment gets its own adapter's part, as it would alone.
BOOST_DATA_TEST_CASE(sessions_with_different_adapters_share_a_batch, bdata::make({"llama", "qwen2"}), name) {
  auto source = open_weights(model_dir(name));
  const ModelConfig& c = source->config();
  auto load = [&](const char* adapter) {
    return LoraAdapter::load(model_dir(name) + "/adapters/" + adapter, c, 0, c.num_layers, backend());
  };
  const auto attn = load("lora-attn"), mlp = load("lora-mlp");
  std::mt19937 rng(11);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::unique_ptr<Block> block = load_block(*source, l, backend());
    std::vector<KVCache> alone;
    for (int i = 0; i < 3; ++i) alone.push_back(block->make_cache(1, 16));
    std::vector<KVCache> batched = pooled_caches(*block, {1, 1, 1}, 16);
    const std::string where = std::string(name) + " block " + std::to_string(l);
    Step with_attn{1, range(0, 5)}, plain{1, range(0, 3)}, with_mlp{1, range(0, 4)};
    with_attn.lora = attn->block(l);
    with_mlp.lora = mlp->block(l);
    BOOST_REQUIRE(with_attn.lora && with_mlp.lora);
    check_round(*block, {with_attn, plain, with_mlp}, alone, batched, rng, c.hidden_size, where + ", prompts");
    with_attn.one = range(5, 6), plain.one = range(3, 4), with_mlp.one = range(4, 6);
    check_round(*block, {with_attn, plain, with_mlp}, alone, batched, rng, c.hidden_size, where + ", decode");
  }
}

BOOST_AUTO_TEST_CASE(rows_outside_every_segment_write_no_cache_and_bad_segments_are_refused) {
  auto source = open_weights(model_dir("llama"));
  const int64_t d = source->config().hidden_size;
  std::unique_ptr<Block> block = load_block(*source, 0, backend());
  KVCache cache = block->make_cache(1, 8);
  const std::vector<int32_t> pos = {0, 1};
  std::mt19937 rng(3);
  Tensor h = backend().upload(random_hidden(rng, 1, 4, d).reshaped({4, d}));
  const BlockSegment tail{.row = 2, .batch = 1, .tokens = 2, .positions = pos, .cache = &cache};
  block->forward_batch(h, {&tail, 1});
  // Slots 2.. stay empty: only the segment's two tokens were written, at positions 0 and 1.
  const Tensor k = cache_slots(cache, false);
  const int64_t per_slot = k.numel() / 8;
  BOOST_TEST(max_abs(k.slice_rows(0, 1).reshaped({8, per_slot}).slice_rows(2, 8).clone()) == 0.0f);
  BOOST_TEST(max_abs(k.slice_rows(0, 1).reshaped({8, per_slot}).slice_rows(0, 2).clone()) > 0.0f);

  auto refused = [&](std::vector<BlockSegment> segments, const std::string& words) {
    expect_error([&] { block->forward_batch(h, segments); }, {words});
  };
  refused({{.row = 0, .batch = 1, .tokens = 2, .positions = pos, .cache = &cache},
           {.row = 1, .batch = 1, .tokens = 2, .positions = pos, .cache = &cache}},
          "overlap");
  refused({{.row = 3, .batch = 1, .tokens = 2, .positions = pos, .cache = &cache}}, "does not fit");
  refused({{.row = 0, .batch = 1, .tokens = 3, .positions = pos, .cache = &cache}}, "2 positions for 3 tokens");
  refused({{.row = 0, .batch = INT64_MAX, .tokens = 2, .positions = pos, .cache = &cache}}, "does not fit");
  Tensor wrong = backend().upload(random_hidden(rng, 1, 4, d));  // [1, 4, D], not [rows, D]
  expect_error([&] { block->forward_batch(wrong, {&tail, 1}); }, {"are not [rows"});
}

// A KV cache held in f16 (`kv_cache_dtype = "f16"`): every golden architecture's blocks, through a prompt and decode
// steps of two sequences, differ from the same blocks with an f32 cache by at most 1e-3 (relative L2 error of the
// outputs; 1e-4 to 6e-4 measured), a thirtieth of what spot checks allow a server that announces an f16 cache
// (3e-2, actors/client/spot_check.cpp), and the change each block makes to its input (attention and MLP) by at most
// 2e-3.
BOOST_DATA_TEST_CASE(an_f16_kv_cache_stays_far_within_the_spot_checks_tolerance, bdata::make(kModels), name) {
  if (!backend().supports_kv(DType::f16)) {
    BOOST_TEST_MESSAGE("skipped: the " << backend().name() << " backend keeps no f16 KV cache");
    return;
  }
  auto source = open_weights(model_dir(name));
  const ModelConfig& c = source->config();
  std::mt19937 rng(11);
  const int32_t prompt = static_cast<int32_t>(std::min<int64_t>(40, c.max_position - 4));
  auto l2 = [](const Tensor& a, const Tensor& b) {  // ||a - b||, and ||b||
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = a.data_as<const float>()[i], y = b.data_as<const float>()[i];
      diff += (x - y) * (x - y);
      norm += y * y;
    }
    return std::pair{std::sqrt(diff), std::sqrt(norm)};
  };
  double worst_output = 0, worst_change = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::unique_ptr<Block> block = load_block(*source, l, backend());
    auto f32 = KVCache::take(block->make_pool(16, 8, DType::f32), 2, prompt + 3, block->kv_window());
    auto f16 = KVCache::take(block->make_pool(16, 8, DType::f16), 2, prompt + 3, block->kv_window());
    BOOST_REQUIRE(f32 && f16);
    BOOST_TEST((f16->pages().k.dtype() == DType::f16 && f16->nbytes() * 2 == f32->nbytes()));
    for (const std::vector<int32_t>& one :
         {range(0, prompt), range(prompt, prompt + 1), range(prompt + 1, prompt + 3)}) {
      const Step step{2, one};
      const Tensor input = random_hidden(rng, 2, step.t(), c.hidden_size);
      Tensor a = backend().upload(input.clone()), b = backend().upload(input.clone());
      block->forward(a, step.positions(), &*f32, nullptr);
      block->forward(b, step.positions(), &*f16, nullptr);
      const Tensor want = backend().download(a).clone(), got = backend().download(b).clone();
      const auto [diff, norm] = l2(got, want);
      Tensor change_want = want.clone(), change_got = got.clone();
      for (int64_t i = 0; i < input.numel(); ++i) {
        change_want.data_as<float>()[i] -= input.data_as<const float>()[i];
        change_got.data_as<float>()[i] -= input.data_as<const float>()[i];
      }
      const auto [change_diff, change_norm] = l2(change_got, change_want);
      worst_output = std::max(worst_output, diff / norm);
      worst_change = std::max(worst_change, change_diff / change_norm);
    }
  }
  BOOST_TEST_MESSAGE(name << ": relative L2 error of the outputs " << worst_output << ", of the blocks' changes "
                          << worst_change);
  BOOST_TEST(worst_output < 1e-3, name << ": outputs differ by " << worst_output);
  BOOST_TEST(worst_change < 2e-3, name << ": the blocks' changes differ by " << worst_change);
  BOOST_TEST(worst_change > 0, name << ": an f16 cache changed nothing");
}
