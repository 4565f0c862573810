// A tokenizer.json (model/tokenizer/tokenizer_hf.cpp, Tokenizer::from_hf_json_text): refused with an error, or a
// tokenizer that encodes and decodes without crashing.
#include <cstdint>
#include <new>
#include <string_view>

#include "tokenizer_exercise.hpp"

using namespace corolla;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    fuzz::exercise(
        Tokenizer::from_hf_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "tokenizer.json"));
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
