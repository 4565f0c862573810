// Every config.json key that changes what a block computes is applied as its Hugging Face class applies it, or
// refused with an error that names it: before, o_proj's bias, mlp_bias, hidden_act and the sliding window were
// ignored (silently wrong logits), and an unsupported family's config failed on a missing key instead of its family.
#define BOOST_TEST_MODULE model_config_options
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "model/config.hpp"
#include "model/weights/weight_source.hpp"
#include "support/expect_error.hpp"
#include "support/golden.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

nlohmann::json config_of(const std::string& model) {
  std::ifstream in(model_dir(model) + "/config.json");
  return nlohmann::json::parse(in);
}

ModelConfig read(const nlohmann::json& j) { return ModelConfig::from_hf_json_text(j.dump(), "config.json"); }

std::vector<int64_t> windows(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < c.num_layers; ++i) out.push_back(c.attention_window(i));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(llama_attention_bias_covers_all_four_projections_and_mlp_bias_the_mlp) {
  nlohmann::json j = config_of("llama");
  ModelConfig plain = read(j);
  BOOST_TEST(!plain.qkv_bias);
  BOOST_TEST(!plain.o_bias);
  BOOST_TEST(!plain.mlp_bias);
  j["attention_bias"] = true;
  ModelConfig attention = read(j);
  BOOST_TEST(attention.qkv_bias);
  BOOST_TEST(attention.o_bias);
  BOOST_TEST(!attention.mlp_bias);
  j["mlp_bias"] = true;
  BOOST_TEST(read(j).mlp_bias);
}

BOOST_AUTO_TEST_CASE(qwen2_has_qkv_biases_only_and_mistral_none_whatever_the_keys_say) {
  nlohmann::json q = config_of("qwen2");
  q["attention_bias"] = false;  // Qwen2's class gives q/k/v biases regardless, and o/MLP none
  q["mlp_bias"] = true;
  const ModelConfig qc = read(q);
  BOOST_TEST(qc.qkv_bias);
  BOOST_TEST(!qc.o_bias);
  BOOST_TEST(!qc.mlp_bias);
  nlohmann::json m = config_of("mistral");
  m["attention_bias"] = true;
  m["mlp_bias"] = true;
  const ModelConfig mc = read(m);
  BOOST_TEST(!mc.qkv_bias);
  BOOST_TEST(!mc.o_bias);
  BOOST_TEST(!mc.mlp_bias);
}

BOOST_AUTO_TEST_CASE(qwen3_normalizes_queries_and_keys_and_its_attention_bias_covers_all_four_projections) {
  nlohmann::json j = config_of("qwen3");
  ModelConfig plain = read(j);
  BOOST_TEST(plain.qk_norm);
  BOOST_TEST(!plain.qkv_bias);
  BOOST_TEST(!plain.o_bias);
  BOOST_TEST(plain.head_dim == 32);
  BOOST_TEST(plain.num_heads * plain.head_dim == 2 * plain.hidden_size);
  j["attention_bias"] = true;
  ModelConfig biased = read(j);
  BOOST_TEST((biased.qkv_bias && biased.o_bias && !biased.mlp_bias));
  j.erase("head_dim");  // Qwen3's class defaults it to 128, not hidden_size / heads
  BOOST_TEST(read(j).head_dim == 128);
}

BOOST_AUTO_TEST_CASE(mixtral_reads_its_experts_and_window) {
  nlohmann::json j = config_of("mixtral");
  const ModelConfig c = read(j);
  BOOST_TEST(c.num_experts == 4);
  BOOST_TEST(c.experts_per_token == 2);
  BOOST_TEST(windows(c) == std::vector<int64_t>(4, 0), boost::test_tools::per_element());
  j["sliding_window"] = 6;  // as Mistral: every layer
  BOOST_TEST(windows(read(j)) == std::vector<int64_t>(4, 6), boost::test_tools::per_element());
  j["sliding_window"] = nullptr;
  j["num_experts_per_tok"] = 5;
  expect_error([&] { read(j); }, {"num_experts_per_tok", "5", "1..4"});
  j.erase("num_local_experts");
  expect_error([&] { read(j); }, {"num_local_experts", "missing"});
}

BOOST_AUTO_TEST_CASE(phi3_is_fused_and_slides_and_rotates_part_of_each_head_where_told) {
  nlohmann::json j = config_of("phi3");
  const ModelConfig c = read(j);
  BOOST_TEST(c.fused_projections);
  BOOST_TEST(windows(c) == std::vector<int64_t>(4, 7), boost::test_tools::per_element());
  BOOST_TEST(c.rope_dim() == c.head_dim);
  j["rope_parameters"]["partial_rotary_factor"] = 0.75;  // Phi-4-mini
  const ModelConfig partial = read(j);
  BOOST_TEST(partial.rotary_dim == c.head_dim * 3 / 4);
  BOOST_TEST(partial.rope_inv_freq().size() == static_cast<size_t>(c.head_dim * 3 / 8));
  // 1/theta^(2i/R) over the rotated part R, as Hugging Face computes it.
  BOOST_TEST(partial.rope_inv_freq()[1] ==
                 1.0f / std::pow(static_cast<float>(c.rope_theta), 2.0f / static_cast<float>(c.head_dim * 3 / 4)),
             boost::test_tools::tolerance(1e-7f));
  j["rope_parameters"]["partial_rotary_factor"] = 1.0;
  j["partial_rotary_factor"] = 0.5;  // the RoPE parameters' factor wins, as Hugging Face standardizes them
  BOOST_TEST(read(j).rope_dim() == c.head_dim);
  j["rope_parameters"].erase("partial_rotary_factor");
  BOOST_TEST(read(j).rotary_dim == c.head_dim / 2);
  j["partial_rotary_factor"] = 1.5;
  expect_error([&] { read(j); }, {"partial_rotary_factor", "1.5"});
  j["partial_rotary_factor"] = 0.01;  // no whole pair of values left
  expect_error([&] { read(j); }, {"partial_rotary_factor", "even count"});
  j.erase("partial_rotary_factor");
  nlohmann::json llama = config_of("llama");  // its block turns whole heads: refused there
  llama["partial_rotary_factor"] = 0.5;
  expect_error([&] { read(llama); }, {"partial_rotary_factor", "phi3 only"});
  j["rope_parameters"]["rope_type"] = "longrope";  // without its factors
  expect_error([&] { read(j); }, {"short_factor", "missing"});
}

// Phi-3's 128k variants: short factors within the original context, long ones past it, chosen per forward.
BOOST_AUTO_TEST_CASE(longrope_reads_both_factor_sets_and_phi3_names_it_su_or_yarn_too) {
  nlohmann::json j = config_of("phi3");
  const ModelConfig plain = read(j);
  const size_t half = static_cast<size_t>(plain.head_dim / 2);
  std::vector<double> short_factor(half, 1.0), long_factor(half, 4.0);
  short_factor.back() = 2.0;
  j["max_position_embeddings"] = 1024;
  j["original_max_position_embeddings"] = 64;
  for (const char* type : {"longrope", "su", "yarn"}) {
    j["rope_scaling"] = {{"type", type}, {"short_factor", short_factor}, {"long_factor", long_factor}};
    const ModelConfig c = read(j);
    BOOST_TEST(c.rope_scaling.type == "longrope");
    BOOST_TEST(c.rope_depends_on_length());
    BOOST_TEST(c.rope_scaling.original_max_position == 64);  // Phi-3's own key, as Hugging Face prefers it
    BOOST_TEST(c.rope_inv_freq(64).front() == plain.rope_inv_freq().front());  // short factor 1
    BOOST_TEST(c.rope_inv_freq(64).back() == 1.0f / (2.0f * (1.0f / plain.rope_inv_freq().back())),
               boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(c.rope_inv_freq(65).front() == plain.rope_inv_freq().front() / 4.0f,
               boost::test_tools::tolerance(1e-6f));
    // sqrt(1 + ln(1024 / 64) / ln(64)) from the contexts' ratio; a given factor or attention_factor wins.
    BOOST_TEST(c.rope_attention_factor() == std::sqrt(1 + std::log(16.0) / std::log(64.0)),
               boost::test_tools::tolerance(1e-12));
  }
  j["rope_scaling"]["factor"] = 2.0;
  BOOST_TEST(read(j).rope_attention_factor() == std::sqrt(1 + std::log(2.0) / std::log(64.0)),
             boost::test_tools::tolerance(1e-12));
  j["rope_scaling"]["attention_factor"] = 1.5;
  BOOST_TEST(read(j).rope_attention_factor() == 1.5);
  j["rope_scaling"]["long_factor"] = std::vector<double>(half - 1, 4.0);
  expect_error([&] { read(j); }, {"long_factor", "one per frequency"});
  j["rope_scaling"]["long_factor"] = long_factor;
  j["rope_scaling"]["short_factor"][0] = -1.0;
  expect_error([&] { read(j); }, {"short_factor", "positive"});
  j["rope_scaling"]["short_factor"][0] = "one";
  expect_error([&] { read(j); }, {"short_factor", "list of numbers"});
}

BOOST_AUTO_TEST_CASE(yarn_reads_its_ramp_and_attention_factor_and_dynamic_keeps_the_frequencies) {
  nlohmann::json j = config_of("qwen2");
  const ModelConfig plain = read(j);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  ModelConfig yarn = read(j);
  BOOST_TEST(yarn.rope_scaling.original_max_position == plain.max_position);  // none given: the model's context
  BOOST_TEST(yarn.rope_attention_factor() == 0.1 * std::log(4.0) + 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(yarn.rope_inv_freq().front() == plain.rope_inv_freq().front());  // the fastest dimension extrapolates
  BOOST_TEST(yarn.rope_inv_freq().back() != plain.rope_inv_freq().back());
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  BOOST_TEST(read(j).rope_attention_factor() == 1.0);  // DeepSeek's: the two mscales cancel
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 0.5}};
  BOOST_TEST(read(j).rope_attention_factor() == 0.5);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig dynamic = read(j);
  BOOST_TEST(dynamic.rope_inv_freq() == plain.rope_inv_freq(), boost::test_tools::per_element());
  BOOST_TEST(dynamic.rope_attention_factor() == 1.0);
}

BOOST_AUTO_TEST_CASE(hidden_act_other_than_silu_is_refused) {
  nlohmann::json j = config_of("llama");
  j["hidden_act"] = "swish";  // SiLU's other name
  BOOST_TEST(read(j).hidden_act == "silu");
  for (const char* act : {"gelu", "gelu_pytorch_tanh", "relu", "bogus"}) {
    j["hidden_act"] = act;
    expect_error([&] { read(j); }, {"hidden_act", act, "silu"});
  }
}

BOOST_AUTO_TEST_CASE(mistral_slides_every_layer_when_the_window_is_set) {
  nlohmann::json j = config_of("mistral");
  j["sliding_window"] = nullptr;
  BOOST_TEST(windows(read(j)) == std::vector<int64_t>(4, 0), boost::test_tools::per_element());
  j["sliding_window"] = 4096;
  BOOST_TEST(windows(read(j)) == std::vector<int64_t>(4, 4096), boost::test_tools::per_element());
  j["sliding_window"] = -3;
  expect_error([&] { read(j); }, {"sliding_window", "-3"});
}

BOOST_AUTO_TEST_CASE(qwen2_slides_the_layers_its_config_marks) {
  nlohmann::json j = config_of("qwen2");
  j.erase("layer_types");
  j["sliding_window"] = 32768;
  j["max_window_layers"] = 2;
  j["use_sliding_window"] = false;  // Qwen2.5's configs: a window given but not used
  BOOST_TEST(windows(read(j)) == std::vector<int64_t>(4, 0), boost::test_tools::per_element());
  j["use_sliding_window"] = true;
  BOOST_TEST(windows(read(j)) == (std::vector<int64_t>{0, 0, 32768, 32768}), boost::test_tools::per_element());
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  BOOST_TEST(windows(read(j)) == (std::vector<int64_t>{32768, 0, 32768, 0}), boost::test_tools::per_element());
  j["layer_types"] = {"sliding_attention", "full_attention"};
  expect_error([&] { read(j); }, {"sliding window", "2 layers", "4"});
  j["layer_types"] = {"chunked_attention", "full_attention", "full_attention", "full_attention"};
  expect_error([&] { read(j); }, {"layer_types", "chunked_attention"});
}

BOOST_AUTO_TEST_CASE(the_architecture_is_checked_before_its_keys) {
  // GPT-2's config (its real key set): no hidden_size or intermediate_size, but that is not what is wrong.
  const nlohmann::json gpt2 = {{"model_type", "gpt2"}, {"n_embd", 64},      {"n_head", 4},
                               {"n_layer", 2},         {"vocab_size", 256}, {"activation_function", "gelu_new"}};
  expect_error([&] { read(gpt2); },
               {"unsupported architecture 'gpt2'", "bloom", "falcon", "llama", "mistral", "qwen2"});
}

// BLOOM's keys are its own (n_layer, n_head, layer_norm_epsilon; n_embed in older files), with no intermediate
// size, RoPE or hidden_act: LayerNorm, ALiBi and the tanh GELU come with the architecture.
BOOST_AUTO_TEST_CASE(bloom_reads_its_own_keys_and_refuses_post_layernorm_residuals) {
  nlohmann::json bloom = {{"model_type", "bloom"}, {"n_embed", 64},     {"n_head", 4},
                          {"n_layer", 2},          {"vocab_size", 256}, {"layer_norm_epsilon", 2e-5}};
  const ModelConfig c = read(bloom);
  BOOST_TEST(c.hidden_size == 64);
  BOOST_TEST(c.intermediate_size == 256);
  BOOST_TEST(c.num_layers == 2);
  BOOST_TEST(c.num_heads == 4);
  BOOST_TEST(c.num_kv_heads == 4);
  BOOST_TEST(c.head_dim == 16);
  BOOST_TEST(c.norm_eps == 2e-5);
  BOOST_TEST((c.layer_norm && c.embedding_norm && c.alibi && c.fused_projections));
  BOOST_TEST((c.qkv_bias && c.o_bias && c.mlp_bias));
  BOOST_TEST(c.hidden_act == "gelu_tanh");
  BOOST_TEST(c.tie_word_embeddings);
  bloom["apply_residual_connection_post_layernorm"] = true;
  expect_error([&] { read(bloom); }, {"apply_residual_connection_post_layernorm", "not supported"});
  bloom.erase("apply_residual_connection_post_layernorm");
  bloom.erase("n_layer");
  expect_error([&] { read(bloom); }, {"num_hidden_layers", "missing"});
  bloom["n_layer"] = 2;
  bloom["n_embed"] = int64_t{1} << 40;  // refused, not multiplied by 4
  expect_error([&] { read(bloom); }, {"hidden_size"});
}

BOOST_AUTO_TEST_CASE(library_quantized_checkpoints_are_refused) {
  nlohmann::json j = config_of("llama");
  j["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
  expect_error([&] { read(j); }, {"quantization_config", "GGUF"});
}

BOOST_AUTO_TEST_CASE(the_golden_models_with_each_option_read_as_written) {
  const ModelConfig bias = ModelConfig::from_hf_json(model_dir("llama-bias") + "/config.json");
  BOOST_TEST((bias.qkv_bias && bias.o_bias && bias.mlp_bias));
  const ModelConfig mistral = ModelConfig::from_hf_json(model_dir("mistral-window") + "/config.json");
  BOOST_TEST(windows(mistral) == std::vector<int64_t>(4, 5), boost::test_tools::per_element());
  const ModelConfig qwen = ModelConfig::from_hf_json(model_dir("qwen2-window") + "/config.json");
  BOOST_TEST(windows(qwen) == (std::vector<int64_t>{0, 0, 4, 4}), boost::test_tools::per_element());
}

// Falcon's keys are its own (ffn_hidden_size, layer_norm_epsilon, bias, activation, num_kv_heads), and three of them
// choose the layout: Falcon-7B's (multi-query, parallel, one LayerNorm) by default.
BOOST_AUTO_TEST_CASE(falcon_reads_its_own_keys_and_layouts) {
  nlohmann::json j = {{"model_type", "falcon"},
                      {"hidden_size", 64},
                      {"num_attention_heads", 4},
                      {"num_hidden_layers", 2},
                      {"vocab_size", 256}};
  ModelConfig c = read(j);
  BOOST_TEST(c.num_kv_heads == 1);  // multi_query
  BOOST_TEST(c.head_dim == 16);
  BOOST_TEST(c.intermediate_size == 256);
  BOOST_TEST((c.parallel_attn && !c.separate_mlp_norm));
  BOOST_TEST((c.layer_norm && c.fused_projections && !c.alibi && !c.embedding_norm));
  BOOST_TEST((!c.qkv_bias && !c.o_bias && !c.mlp_bias));
  BOOST_TEST(c.hidden_act == "gelu");
  BOOST_TEST(c.tie_word_embeddings);
  BOOST_TEST(c.rope_theta == 10000.0);
  BOOST_TEST(c.max_position == 2048);

  j["bias"] = true;
  j["ffn_hidden_size"] = 96;
  j["layer_norm_epsilon"] = 2e-5;
  j["activation"] = "gelu_pytorch_tanh";
  j["rope_theta"] = 500000.0;
  c = read(j);
  BOOST_TEST((c.qkv_bias && c.o_bias && c.mlp_bias));
  BOOST_TEST(c.intermediate_size == 96);
  BOOST_TEST(c.norm_eps == 2e-5);
  BOOST_TEST(c.hidden_act == "gelu_tanh");
  BOOST_TEST(c.rope_theta == 500000.0);
  j["activation"] = "relu";
  expect_error([&] { read(j); }, {"'activation'", "relu", "gelu"});
  j.erase("activation");

  // The new decoder architecture (40B, 180B): grouped KV heads, ln_attn and ln_mlp unless told one.
  j["new_decoder_architecture"] = true;
  j["num_kv_heads"] = 2;
  c = read(j);
  BOOST_TEST(c.num_kv_heads == 2);
  BOOST_TEST((c.parallel_attn && c.separate_mlp_norm));
  j["num_ln_in_parallel_attn"] = 1;  // Falcon 2
  c = read(j);
  BOOST_TEST((c.parallel_attn && !c.separate_mlp_norm));
  j["num_ln_in_parallel_attn"] = 3;
  expect_error([&] { read(j); }, {"num_ln_in_parallel_attn", "3"});
  j["num_ln_in_parallel_attn"] = 2;
  j["parallel_attn"] = false;  // Hugging Face's layer has no such form
  expect_error([&] { read(j); }, {"parallel_attn", "new_decoder_architecture"});
  j["parallel_attn"] = true;
  j["num_kv_heads"] = 3;
  expect_error([&] { read(j); }, {"num_key_value_heads", "3"});

  // The old layout: multi_query false keeps a key and a value per query head; parallel_attn false runs the MLP after
  // attention, through post_attention_layernorm.
  j["new_decoder_architecture"] = false;
  j.erase("num_ln_in_parallel_attn");
  j["multi_query"] = false;
  j["parallel_attn"] = false;
  j["num_kv_heads"] = 4;
  c = read(j);
  BOOST_TEST(c.num_kv_heads == 4);
  BOOST_TEST(!c.parallel_attn);
  j["num_kv_heads"] = 2;
  expect_error([&] { read(j); }, {"num_kv_heads", "multi_query"});
  j.erase("num_kv_heads");
  j["parallel_attn"] = true;
  j["num_ln_in_parallel_attn"] = 2;  // separate norms exist only in the new architecture
  expect_error([&] { read(j); }, {"num_ln_in_parallel_attn", "new_decoder_architecture"});
  j.erase("num_ln_in_parallel_attn");

  j["alibi"] = true;  // Falcon-RW
  expect_error([&] { read(j); }, {"alibi", "not supported"});
  j["alibi"] = false;
  j["apply_residual_connection_post_layernorm"] = true;
  expect_error([&] { read(j); }, {"apply_residual_connection_post_layernorm", "not supported"});
  j["apply_residual_connection_post_layernorm"] = false;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  c = read(j);
  BOOST_TEST(c.rope_scaling.type == "linear");
  j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 2.0}};
  expect_error([&] { read(j); }, {"rope_scaling", "ntk-by-parts"});
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  expect_error([&] { read(j); }, {"longrope", "falcon"});
}

// Gemma 2 as Gemma2Config reads it: its own defaults (head_dim 256, eps 1e-6, 8192 positions, tied embeddings, caps
// 50 and 30, a 4096-token window on the even layers), hidden_activation (not hidden_act), null for no cap, and
// layer_types where given.
BOOST_AUTO_TEST_CASE(gemma2_reads_its_own_keys_and_defaults) {
  nlohmann::json j = {{"model_type", "gemma2"},   {"hidden_size", 64},
                      {"num_attention_heads", 4}, {"num_hidden_layers", 4},
                      {"vocab_size", 256},        {"intermediate_size", 128},
                      {"num_key_value_heads", 2}, {"hidden_act", "gelu_pytorch_tanh"}};
  ModelConfig c = read(j);
  BOOST_TEST(c.head_dim == 256);
  BOOST_TEST(c.norm_eps == 1e-6);
  BOOST_TEST(c.max_position == 8192);
  BOOST_TEST(c.tie_word_embeddings);
  BOOST_TEST(c.hidden_act == "gelu_tanh");
  BOOST_TEST((c.norm_plus_one && c.scale_embeddings && c.post_norms));
  BOOST_TEST((!c.qkv_bias && !c.o_bias && !c.mlp_bias));
  BOOST_TEST(c.query_pre_attn_scalar == 256.0);
  BOOST_TEST(c.attn_softcap == 50.0);
  BOOST_TEST(c.final_softcap == 30.0);
  BOOST_TEST(windows(c) == (std::vector<int64_t>{4096, 0, 4096, 0}), boost::test_tools::per_element());

  j["head_dim"] = 32;
  j["query_pre_attn_scalar"] = 144;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = 12.5;
  j["attention_bias"] = true;
  j["hidden_activation"] = "gelu";
  j["sliding_window"] = 7;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  c = read(j);
  BOOST_TEST(c.head_dim == 32);
  BOOST_TEST(c.query_pre_attn_scalar == 144.0);
  BOOST_TEST(c.attn_softcap == 0.0);
  BOOST_TEST(c.final_softcap == 12.5);
  BOOST_TEST((c.qkv_bias && c.o_bias && !c.mlp_bias));
  BOOST_TEST(c.hidden_act == "gelu");
  BOOST_TEST(windows(c) == (std::vector<int64_t>{0, 7, 7, 0}), boost::test_tools::per_element());
  j["layer_types"] = std::vector<std::string>(4, "full_attention");
  j["sliding_window"] = nullptr;  // no layer slides: no window needed
  BOOST_TEST(windows(read(j)) == std::vector<int64_t>(4, 0), boost::test_tools::per_element());

  // What no block computes is refused by name.
  j.erase("layer_types");
  expect_error([&] { read(j); }, {"sliding_window", "null", "sliding_attention"});
  j["sliding_window"] = 4096;
  for (const auto& [key, value, words] : std::vector<std::tuple<const char*, nlohmann::json, std::vector<std::string>>>{
           {"hidden_activation", "relu", {"hidden_activation", "relu", "gelu_pytorch_tanh"}},
           {"attn_logit_softcapping", -1.0, {"attn_logit_softcapping", "above 0", "null"}},
           {"final_logit_softcapping", 0.0, {"final_logit_softcapping", "above 0"}},
           {"final_logit_softcapping", "big", {"final_logit_softcapping", "number"}},
           {"query_pre_attn_scalar", 0, {"query_pre_attn_scalar", "above 0"}},
           {"use_bidirectional_attention", true, {"use_bidirectional_attention"}},
           {"layer_types", nlohmann::json{"chunked_attention"}, {"layer_types", "chunked_attention"}},
           {"rope_scaling", nlohmann::json{{"rope_type", "mrope"}}, {"rope_scaling", "mrope"}},
           {"partial_rotary_factor", 0.5, {"partial_rotary_factor", "phi3"}}}) {
    nlohmann::json bad = j;
    bad[key] = value;
    bool refused = false;
    try {
      read(bad);
    } catch (const std::exception& e) {
      refused = true;
      for (const auto& w : words)
        BOOST_TEST(std::string(e.what()).find(w) != std::string::npos, e.what() << " / " << w);
    }
    BOOST_TEST(refused, key << " " << value.dump() << " was not refused");
  }
  // The committed golden models read as written.
  const ModelConfig g = ModelConfig::from_hf_json(model_dir("gemma2") + "/config.json");
  BOOST_TEST(windows(g) == (std::vector<int64_t>{5, 0, 5, 0}), boost::test_tools::per_element());
  BOOST_TEST((g.attn_softcap == 2.0 && g.final_softcap == 1.5 && g.query_pre_attn_scalar == 16.0));
  const ModelConfig o = ModelConfig::from_hf_json(model_dir("gemma2-options") + "/config.json");
  BOOST_TEST(windows(o) == (std::vector<int64_t>{0, 4, 4, 0}), boost::test_tools::per_element());
  BOOST_TEST((o.attn_softcap == 0.0 && o.final_softcap == 0.0 && o.query_pre_attn_scalar == 16.0));
  BOOST_TEST((o.head_dim == 32 && o.qkv_bias && o.o_bias && o.hidden_act == "gelu"));
}

// A GGUF gemma2 file as llama.cpp's converter writes it: no query_pre_attn_scalar key, so the query scale follows
// llama.cpp's rule (head_dim, or hidden / heads for 46 blocks); windows on the even layers; the caps it holds.
BOOST_AUTO_TEST_CASE(gemma2_gguf_reads_as_llama_cpp_reads_it) {
  const auto source = open_weights(model_dir("gemma2") + "/model-f32.gguf");
  const ModelConfig& c = source->config();
  BOOST_TEST(c.arch == "gemma2");
  BOOST_TEST(c.query_pre_attn_scalar == 16.0);
  BOOST_TEST((c.attn_softcap == 2.0 && c.final_softcap == 1.5));
  BOOST_TEST(windows(c) == (std::vector<int64_t>{5, 0, 5, 0}), boost::test_tools::per_element());
  BOOST_TEST((c.norm_plus_one && c.scale_embeddings && c.post_norms && c.tie_word_embeddings));
  BOOST_TEST(c.hidden_act == "gelu_tanh");
  // Its norms hold 1 + weight; the source gives Hugging Face's weight (within f32's rounding of the 1 added).
  const auto hf = open_weights(model_dir("gemma2"));
  for (const char* name :
       {"model.layers.1.pre_feedforward_layernorm.weight", "model.layers.2.post_feedforward_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight"}) {
    const Tensor a = source->get(name), b = hf->get(name);
    BOOST_REQUIRE(a.numel() == b.numel());
    float worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      worst = std::max(worst, std::fabs(a.data_as<const float>()[i] - b.data_as<const float>()[i]));
    BOOST_TEST(worst < 1e-7f, name);
  }
}
