// A GGUF file (model/weights/gguf_file.hpp): header, metadata and tensor table, then the model config read from
// its metadata. A bad file must be refused with an error; an accepted one must keep every promise the loader
// relies on (tensors inside the file, not overlapping, sizes that match their type and shape).
#include <cstdint>
#include <new>
#include <string>

#include "model/config.hpp"
#include "model/weights/gguf_file.hpp"
#include "model/weights/tensor_extent.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<GgufFile> g;
  try {
    g = GgufFile::parse(MappedFile::from_bytes("fuzz.gguf", std::string(reinterpret_cast<const char*>(data), size)));
  } catch (const std::bad_alloc&) {
    __builtin_trap();  // an allocation sized by the file, not bounded by it
  } catch (const std::exception&) {
    return 0;
  }
  for (const auto& t : g->tensors()) {
    require(t.offset <= size && static_cast<uint64_t>(t.nbytes) <= size - t.offset);
    require(checked_tensor_bytes(t.dtype, t.shape) == t.nbytes);
    require(g->find_tensor(t.name) == &t);
    (void)g->tensor(t);
  }
  try {
    const ModelConfig c = ModelConfig::from_gguf(*g);
    require(c.num_heads > 0 && c.hidden_size % c.num_heads == 0 && c.num_heads % c.num_kv_heads == 0);
    require(c.rope_dim() <= c.head_dim && static_cast<int64_t>(c.rope_inv_freq().size()) == c.rope_dim() / 2);
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
