#include "actors/client/spot_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace corolla {

std::vector<size_t> hops_to_check(const spot_check_options& o, const std::vector<bool>& unchecked,
                                  std::mt19937_64& rng) {
  std::vector<size_t> out;
  if (o.every <= 0) return out;
  std::uniform_int_distribution<int64_t> one_in(0, o.every - 1);
  for (size_t k = 0; k < unchecked.size(); ++k)
    if (one_in(rng) == 0 || (o.new_servers && unchecked[k])) out.push_back(k);
  return out;
}

std::optional<history_entry> verification_input(const std::vector<history_entry>& history, const history_entry& step) {
  std::vector<history_entry> all = history;
  all.push_back(step);
  return as_one_forward(all);
}

std::optional<history_entry> as_one_forward(const std::vector<history_entry>& entries) {
  auto merged = merge_for_replay(entries);
  if (merged.size() != 1) return std::nullopt;
  const history_entry& e = merged.front();
  const int64_t b = e.hidden.dim(0), t = e.hidden.dim(1);
  for (int64_t i = 0; i < b; ++i)
    if (e.positions[static_cast<size_t>(i * t)] != 0) return std::nullopt;
  return std::move(merged.front());
}

Tensor last_tokens(const Tensor& hidden, int64_t tokens) {
  const int64_t b = hidden.dim(0), t = hidden.dim(1), d = hidden.dim(2);
  tokens = std::clamp<int64_t>(tokens, 0, t);
  Tensor out = Tensor::empty(DType::f32, {b, tokens, d});
  for (int64_t i = 0; i < b; ++i)
    std::memcpy(out.data_as<float>() + i * tokens * d, hidden.data_as<const float>() + (i * t + t - tokens) * d,
                static_cast<size_t>(tokens * d) * sizeof(float));
  return out;
}

namespace {
// The relative L2 error two honest servers of this dtype may show ("auto": the file's own, unknown to the client).
double tolerance_of(const std::string& dtype) {
  if (dtype == "f32") return 1e-3;
  if (dtype == "f16" || dtype == "bf16" || dtype == "auto" || dtype.empty()) return 3e-2;
  if (dtype == "q8_0") return 5e-2;
  return 0.15;  // 4-bit and other quantized formats
}
}  // namespace

double output_tolerance(const std::string& dtype_a, const std::string& dtype_b) {
  return std::max(tolerance_of(dtype_a), tolerance_of(dtype_b));
}

std::string compare_outputs(const Tensor& got, const Tensor& want, double tolerance) {
  if (got.dtype() != DType::f32 || want.dtype() != DType::f32 || got.shape() != want.shape())
    return "the outputs " + got.describe() + " and " + want.describe() + " do not match in shape";
  const float* g = got.data_as<const float>();
  const float* w = want.data_as<const float>();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!std::isfinite(g[i])) return "the output holds " + std::to_string(g[i]) + " at element " + std::to_string(i);
    const double d = static_cast<double>(g[i]) - static_cast<double>(w[i]);
    diff += d * d;
    norm += static_cast<double>(w[i]) * static_cast<double>(w[i]);
  }
  const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  if (std::isfinite(rel) && rel <= tolerance) return {};
  std::ostringstream out;
  out << "the outputs differ by a relative L2 error of " << rel << " (tolerance " << tolerance << ")";
  return out.str();
}

// What a server's KV cache adds: an f16 cache rounds every key and value to 11 bits, 1e-4 to 6e-4 of relative error
// per block on the golden models (test_batched_forward), as many as f16 weights' rounding; an f32 one nothing.
double kv_tolerance(const std::string& kv_dtype) { return kv_dtype == "f16" ? tolerance_of("f16") : 0; }

double tolerance_for(const planned_hop& hop, const std::vector<planned_hop>& chain) {
  double t = std::max(output_tolerance(hop.dtype, hop.dtype), kv_tolerance(hop.kv_dtype));
  for (const auto& v : chain) t = std::max({t, output_tolerance(hop.dtype, v.dtype), kv_tolerance(v.kv_dtype)});
  return t;
}

void decide_check(std::set<std::string> avoid, recompute_fn recompute,
                  std::function<std::string(const recomputation&)> differs,
                  std::function<void(const planned_hop&)> outvoted, std::function<void(check_result)> done) {
  recompute(avoid, [=](caf::expected<recomputation> first) mutable {
    if (!first) return done({check_result::unverified, {}});
    const std::string diff = differs(*first);
    if (diff.empty()) return done({check_result::agreed, {}});
    for (const auto& v : first->chain) avoid.insert(peer_id(v));
    recompute(avoid, [=](caf::expected<recomputation> second) mutable {
      if (!second || !differs(*second).empty()) return done({check_result::lied, diff});
      for (const auto& v : first->chain) outvoted(v);  // the first verifier was the liar
      done({check_result::agreed, {}});
    });
  });
}

}  // namespace corolla
