// config.json to a validated ModelConfig (model/config.hpp). An accepted config must make every size derived from
// it fit in int64 and every division by it safe: that is what validate() promises the rest of the code.
#include <cmath>
#include <cstdint>
#include <new>
#include <string_view>

#include "model/config.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

namespace {
bool fits(std::initializer_list<int64_t> factors) {
  int64_t n = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(n, f, &n)) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ModelConfig c;
  try {
    c = ModelConfig::from_hf_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
    return 0;
  }
  require(c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0 && c.head_dim % 2 == 0);
  require(c.hidden_size % c.num_heads == 0 && c.num_heads % c.num_kv_heads == 0);
  // Embeddings and LM head, one block's projections, a KV cache of max_position tokens, in bytes (f32).
  require(fits({c.vocab_size, c.hidden_size, 4}));
  require(fits({c.num_heads, c.head_dim, c.hidden_size, 4}));
  require(fits({c.intermediate_size, c.hidden_size, 3, 4}));
  require(fits({c.max_position, c.num_kv_heads, c.head_dim, 2, 4}));
  require(std::isfinite(c.norm_eps) && c.norm_eps > 0 && std::isfinite(c.rope_theta) && c.rope_theta > 0);
  for (float f : c.rope_inv_freq()) require(std::isfinite(f));
  // What the block computes was either read or refused: its family's activation, a window for each layer or none.
  if (c.arch == "bloom")
    require(c.hidden_act == "gelu_tanh");
  else if (c.arch == "falcon" || c.arch == "gemma2")
    require(c.hidden_act == "gelu" || c.hidden_act == "gelu_tanh");
  else
    require(c.hidden_act == "silu");
  // Gemma 2's scale and soft caps are numbers the kernels can use (0: none).
  for (double v : {c.query_pre_attn_scalar, c.attn_softcap, c.final_softcap}) require(std::isfinite(v) && v >= 0);
  require(c.sliding_window >= 0 &&
          (c.sliding_window == 0 || static_cast<int64_t>(c.window_layers.size()) == c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) require(c.attention_window(i) >= 0);
  return 0;
}
