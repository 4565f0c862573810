// Helpers for tests that compare with the golden outputs of tools/make_golden.py (tests/data/models/*).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "model/weights/safetensors_file.hpp"

namespace corolla::test {

// The golden models of tools/make_golden.py, one per architecture and config option they check.
inline const char* const kGoldenModels[] = {
    "llama",      "mistral",       "qwen2",          "llama3-rope",  "qwen2-yarn", "llama-sharded",
    "llama-bf16", "llama-bias",    "mistral-window", "qwen2-window", "qwen3",      "mixtral",
    "phi3",       "phi3-longrope", "bloom",          "falcon",       "falcon-new", "falcon-sequential",
    "falcon2",    "gemma2",        "gemma2-options", "llama-kquant"};

// The backend the golden suites compute on: COROLLA_TEST_DEVICE=cuda runs them on the CUDA backend
// (tools/gpu_check.sh does), the CPU otherwise.
inline Backend& golden_backend() {
  static auto b = [] {
    const char* device = std::getenv("COROLLA_TEST_DEVICE");
    return make_backend(device && *device ? device : "cpu");
  }();
  return *b;
}

inline std::string model_dir(const std::string& name) { return std::string(COROLLA_TEST_DATA) + "/models/" + name; }

// Golden tensors of one model (golden.safetensors, or golden-<kind>.safetensors).
struct Golden {
  std::shared_ptr<SafetensorsFile> file;
  explicit Golden(const std::string& model, const std::string& kind = "")
      : file(SafetensorsFile::open(model_dir(model) + "/golden" + (kind.empty() ? "" : "-" + kind) + ".safetensors")) {}
  Tensor tensor(const std::string& name) const { return file->tensor(name); }
  std::vector<int32_t> ids(const std::string& name) const {
    Tensor t = tensor(name);
    const auto* p = t.data_as<const int64_t>();
    return std::vector<int32_t>(p, p + t.numel());
  }
};

inline float max_abs_diff(const float* a, const float* b, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  return max_abs_diff(a.data_as<const float>(), b.data_as<const float>(), a.numel());
}

inline float max_abs(const Tensor& a) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.data_as<const float>()[i]));
  return m;
}

}  // namespace corolla::test
