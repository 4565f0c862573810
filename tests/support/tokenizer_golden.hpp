// The small tokenizers of tools/make_tokenizer_golden.py (tests/data/tokenizers/NAME/: tokenizer.json,
// tokenizer_config.json, golden.json, and for the byte-level ones llama.cpp names vocab.gguf and gguf_golden.json).
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

inline std::string tokenizer_dir(const std::string& name) {
  return std::string(COROLLA_TEST_DATA) + "/tokenizers/" + name;
}

// One of the JSON files of that directory.
inline nlohmann::json tokenizer_golden(const std::string& name, const std::string& file = "golden.json") {
  const std::string path = tokenizer_dir(name) + "/" + file;
  std::ifstream f(path);
  if (!f) throw std::runtime_error("missing " + path + " (run tools/make_tokenizer_golden.py)");
  return nlohmann::json::parse(f);
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace corolla::test
