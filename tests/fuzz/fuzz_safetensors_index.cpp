// model.safetensors.index.json (model/weights/safetensors_index.hpp): every shard name it accepts is a plain
// .safetensors file name, so joining it to the model directory never leads elsewhere.
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include "model/weights/safetensors_index.hpp"

using namespace corolla;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto index = parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size), "index");
    for (const auto& [name, shard] : index)
      if (shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos || shard.starts_with(".") ||
          !shard.ends_with(".safetensors"))
        __builtin_trap();
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
