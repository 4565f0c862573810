// A GGUF vocabulary (model/tokenizer/tokenizer_gguf.cpp, tokenizer.ggml.* metadata): refused with an error, or a
// tokenizer that encodes and decodes without crashing.
#include <cstdint>
#include <new>
#include <string>

#include "model/weights/gguf_file.hpp"
#include "tokenizer_exercise.hpp"

using namespace corolla;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g =
        GgufFile::parse(MappedFile::from_bytes("fuzz.gguf", std::string(reinterpret_cast<const char*>(data), size)));
    fuzz::exercise(Tokenizer::from_gguf(*g));
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
