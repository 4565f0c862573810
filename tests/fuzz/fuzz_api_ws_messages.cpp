// The messages of the Petals WebSocket API (/api/v2/generate) as a client may send them: the first byte says
// whether the socket has a session yet (open_inference_session expected) or not (generate), the rest is the
// message. A message is either read into a request whose fields are in range, or refused with an ApiError whose
// reply (as json_text writes it) is valid JSON; nothing else may happen.
#include <cstdint>
#include <string>

#include "apps/api/json_text.hpp"
#include "apps/api/petals_messages.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using corolla::fuzz::require;

using namespace corolla::api;

namespace {
constexpr int64_t kLimit = 1024;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  const bool want_open = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const PetalsMessage m = read_petals_message(text, want_open, kLimit);
    if (const auto* o = std::get_if<PetalsOpen>(&m)) {
      require(want_open && o->max_length >= 2);
    } else {
      const auto& g = std::get<PetalsGenerate>(m);
      require(!want_open && (g.max_new_tokens || g.max_length));
      require(!g.max_new_tokens || (*g.max_new_tokens >= 1 && *g.max_new_tokens <= kLimit));
      require(!g.max_length || *g.max_length >= 1);
      require(g.extra_stop_sequences.size() <= 16 && (g.stop_sequence || g.extra_stop_sequences.empty()));
      g.sampling.validate();
    }
  } catch (const ApiError& e) {
    require(e.status == 400);
    const std::string reply = json_text({{"ok", false}, {"traceback", e.message}});
    require(nlohmann::json::accept(reply));
  }
  return 0;
}
