// Reads llama.cpp's external tokenizer vectors (COROLLA_SHARED_TESTDATA/tokenizers/): ggml-vocab-NAME.gguf,
// NAME.gguf.inp (texts, each followed by "\n__ggml_vocab_test__\n") and NAME.gguf.out (one line of ids per
// text). They are read in place and never copied into the repository.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

inline const char* kExternalVocabs[] = {"gpt-2", "llama-bpe", "llama-spm", "qwen2"};

inline std::filesystem::path vectors_dir() { return std::filesystem::path(COROLLA_SHARED_TESTDATA) / "tokenizers"; }

inline std::string vocab_path(const std::string& name) {
  return (vectors_dir() / ("ggml-vocab-" + name + ".gguf")).string();
}

// Exits with 77 (CTest: skipped) when the vectors are not on this machine.
inline void require_vectors_or_skip() {
  for (const char* name : kExternalVocabs) {
    if (!std::filesystem::exists(vocab_path(name))) {
      std::cout << "skipped: external tokenizer vectors not found at " << vectors_dir() << "\n";
      std::exit(77);
    }
  }
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct VectorCase {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::vector<VectorCase> read_vectors(const std::string& name) {
  const std::string inp = read_file(vocab_path(name) + ".inp");
  const std::string out = read_file(vocab_path(name) + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VectorCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) throw std::runtime_error(name + ".inp: last text lacks its separator");
    cases.push_back({inp.substr(pos, hit - pos), {}});
    pos = hit + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= cases.size()) throw std::runtime_error(name + ".out: more lines than texts");
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[i].ids.push_back(id);
    ++i;
  }
  if (i != cases.size())
    throw std::runtime_error(name + ".out: " + std::to_string(i) + " lines for " + std::to_string(cases.size()) +
                             " texts");
  return cases;
}

}  // namespace corolla::test
