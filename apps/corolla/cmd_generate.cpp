// corolla generate: run a whole model in this process and stream the new token ids.
#include <chrono>
#include <iostream>
#include <sstream>

#include "apps/corolla/commands.hpp"
#include "model/local_model.hpp"
#include "model/model_path.hpp"

namespace corolla::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt_ids;
  int64_t max_new_tokens = 32;
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  float repetition_penalty = 1;
  uint64_t seed = 0;
  std::string dtype = "auto";
  std::string device = "cpu";
  int threads = 0;
  bool ignore_eos = false;
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw std::invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw std::invalid_argument("--prompt-ids: no token ids given");
  return ids;
}

int run(const GenerateOptions& o) {
  std::optional<DType> dtype;
  if (o.dtype != "auto") {
    dtype = parse_dtype(o.dtype);
    if (!dtype) throw std::invalid_argument("--dtype: unknown dtype '" + o.dtype + "'");
  }
  auto backend = make_backend(o.device, o.threads);
  const auto t_load = std::chrono::steady_clock::now();
  LocalModel model(open_weights(resolve_model_path(o.model)), *backend, dtype);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::cerr << "loaded " << model.config().arch << " (" << model.config().num_layers << " blocks, "
            << model.weight_bytes() / 1e6 << " MB of block weights) in " << load_s << " s on " << backend->name()
            << "\n";

  GenerationParams params;
  params.max_new_tokens = o.max_new_tokens;
  params.stop_at_eos = !o.ignore_eos;
  params.sampling.greedy = o.temperature == 0;
  params.sampling.temperature = o.temperature > 0 ? o.temperature : 1.0f;
  params.sampling.top_k = o.top_k;
  params.sampling.top_p = o.top_p;
  params.sampling.repetition_penalty = o.repetition_penalty;
  params.sampling.seed = o.seed;

  const auto prompt = parse_ids(o.prompt_ids);
  auto t0 = std::chrono::steady_clock::now();
  auto t_first = t0;
  size_t n = 0;
  generate(model, prompt, params, [&](int32_t id) {
    if (n++ == 0) t_first = std::chrono::steady_clock::now();
    std::cout << (n > 1 ? " " : "") << id << std::flush;
    return true;
  });
  const auto t1 = std::chrono::steady_clock::now();
  std::cout << "\n";
  const double prefill = std::chrono::duration<double>(t_first - t0).count();
  const double decode = std::chrono::duration<double>(t1 - t_first).count();
  std::cerr << "prompt " << prompt.size() << " tokens in " << prefill * 1e3 << " ms; " << n << " tokens generated";
  if (n > 1) std::cerr << ", " << (n - 1) / decode << " tokens/s";
  std::cerr << "\n";
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens with a whole model in this process");
  cmd->add_option("--model", o->model, "Model directory (config.json + safetensors), .gguf file, or 'demo'")
      ->required();
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma separated (e.g. 1,2,3)")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", o->temperature, "0 = greedy; > 0 samples")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", o->repetition_penalty, "Penalty for repeated tokens (1 = off)");
  cmd->add_option("--seed", o->seed, "Random seed for sampling");
  cmd->add_option("--dtype", o->dtype, "Serving dtype of weights: auto, f32, bf16, f16, q8_0, q4_0, q4_1");
  cmd->add_option("--device", o->device, "cpu or cuda[:N]");
  cmd->add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past the end-of-sequence token");
  return [o] { return run(*o); };
}

}  // namespace corolla::cli
