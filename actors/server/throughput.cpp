#include "actors/server/throughput.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

#include "actors/store/node_store.hpp"
#include "actors/store/xxhash64.hpp"
#include "model/block.hpp"
#include "model/recorded_steps.hpp"

namespace corolla {
namespace {

using Clock = std::chrono::steady_clock;

Tensor random_hidden(int64_t tokens, int64_t hidden) {
  Tensor t = Tensor::empty(DType::f32, {1, tokens, hidden});
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = normal(rng);
  return t;
}

// Tokens per second of `step(i)` run after one warm-up step, until `max_steps` or `seconds` have passed.
template <class Step>
double tokens_per_second(Backend& backend, int64_t tokens_per_step, int max_steps, double seconds, Step step) {
  step(0);
  backend.synchronize();
  const auto t0 = Clock::now();
  int done = 0;
  double elapsed = 0;
  while (done < std::max(1, max_steps)) {
    step(done + 1);
    backend.synchronize();
    ++done;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (elapsed >= seconds) break;
  }
  return static_cast<double>(done * tokens_per_step) / std::max(elapsed, 1e-9);
}

}  // namespace

compute_rates measure_compute_rates(const WeightSource& source, Backend& backend, std::optional<DType> dtype,
                                    const measure_limits& limits) {
  const ModelConfig& c = source.config();
  std::unique_ptr<Block> block = load_block(source, first_block_held(source), backend, {dtype});
  compute_rates out;
  // Inference: one token per step at growing positions, each step from the same input (feeding the output back
  // could drift into denormals or infinities, which would time something else).
  {
    const int steps = limits.inference_steps;
    KVCache cache = block->make_cache(1, std::min<int64_t>(steps + 2, c.max_position));
    const Tensor input = random_hidden(1, c.hidden_size);
    RecordedSteps recorded;  // as the block actor runs decode steps
    out.inference_rps = tokens_per_second(backend, 1, steps, limits.seconds_each, [&](int i) {
      Tensor h = backend.device() == Device::cpu ? input.clone() : backend.upload(input);
      const int32_t pos = static_cast<int32_t>(std::min<int64_t>(i, cache.max_length() - 1));
      recorded.forward(*block, h, std::span<const int32_t>(&pos, 1), &cache, nullptr);
    });
  }
  // Forward: a batch of 1024 tokens (or the model's context) without a cache.
  {
    const int64_t tokens = std::min<int64_t>(limits.forward_tokens, c.max_position);
    const Tensor input = random_hidden(tokens, c.hidden_size);
    std::vector<int32_t> positions(static_cast<size_t>(tokens));
    std::iota(positions.begin(), positions.end(), 0);
    out.forward_rps = tokens_per_second(backend, tokens, limits.forward_steps, limits.seconds_each, [&](int) {
      Tensor h = backend.device() == Device::cpu ? input.clone() : backend.upload(input);
      block->forward(h, positions, nullptr);
    });
  }
  return out;
}

std::string throughput_cache_key(const WeightSource& source, const Backend& backend, std::optional<DType> dtype) {
  const ModelConfig& c = source.config();
  // The shape decides the work per token; the weights' values do not.
  std::string shape = c.arch;
  for (int64_t v : {c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim}) {
    shape += '/';
    shape += std::to_string(v);
  }
  shape += c.qkv_bias ? "/bias" : "";
  shape += c.o_bias ? "/o_bias" : "";
  shape += c.mlp_bias ? "/mlp_bias" : "";
  shape += c.qk_norm ? "/qk_norm" : "";
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx",
                static_cast<unsigned long long>(store::xxhash64(shape.data(), shape.size(), 0)));
  return std::string(digest) + "/" + backend.name() + "/" +
         (dtype ? std::string(dtype_name(*dtype)) : stored_dtype_name(source));
}

double announced_throughput(double forward_rps, double network_rps, int64_t num_blocks) {
  const double average_blocks_used = (static_cast<double>(std::max<int64_t>(num_blocks, 1)) + 1) / 2;
  double t = forward_rps / average_blocks_used;
  if (network_rps > 0) t = std::min(t, network_rps);
  return t;
}

throughput_info resolve_throughput(const std::string& setting, const WeightSource& source, Backend& backend,
                                   std::optional<DType> dtype, int64_t num_blocks, double network_rps, NodeStore* store,
                                   const measure_limits& limits) {
  throughput_info out;
  out.network_rps = network_rps;
  if (setting != "auto" && setting != "eval") {
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(setting, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != setting.size() || !(value >= 0) || !std::isfinite(value))
      throw std::runtime_error("throughput must be \"auto\", \"eval\" or a number >= 0, got \"" + setting + "\"");
    out.throughput = value;
    out.source = "given";
    return out;
  }
  const std::string key = throughput_cache_key(source, backend, dtype);
  std::optional<double> inference, forward;
  if (setting == "auto" && store) {
    inference = store->throughput(key + "/inference_rps");
    forward = store->throughput(key + "/forward_rps");
  }
  if (inference && forward && *inference > 0 && *forward > 0) {
    out.inference_rps = *inference;
    out.forward_rps = *forward;
    out.source = "cached";
  } else {
    const compute_rates r = measure_compute_rates(source, backend, dtype, limits);
    out.inference_rps = r.inference_rps;
    out.forward_rps = r.forward_rps;
    out.source = "measured";
    if (store) {
      store->put_throughput(key + "/inference_rps", r.inference_rps);
      store->put_throughput(key + "/forward_rps", r.forward_rps);
    }
  }
  out.throughput = announced_throughput(out.forward_rps, network_rps, num_blocks);
  return out;
}

}  // namespace corolla
