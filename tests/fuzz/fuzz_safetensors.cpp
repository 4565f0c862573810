// A safetensors file's header (model/weights/safetensors_file.hpp): its length, the JSON of names, dtypes, shapes
// and data offsets. An accepted file's tensors lie inside the data, match dtype x shape, and do not overlap.
#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "model/weights/safetensors_file.hpp"
#include "model/weights/tensor_extent.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace corolla;
using corolla::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::parse(
        MappedFile::from_bytes("fuzz.safetensors", std::string(reinterpret_cast<const char*>(data), size)));
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
    return 0;
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, t] : f->tensors()) {
    require(t.offset <= size && static_cast<uint64_t>(t.nbytes) <= size - t.offset);
    require(checked_tensor_bytes(t.dtype, t.shape) == t.nbytes);
    (void)f->tensor(t);
    if (t.nbytes > 0) ranges.emplace_back(t.offset, t.offset + static_cast<uint64_t>(t.nbytes));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) require(ranges[i].first >= ranges[i - 1].second);
  return 0;
}
