// The JSON body readers the HTTP endpoints share (apps/api/request_fields.hpp, petals_messages.hpp): any bytes as
// a request body, read as the first byte says: OpenAI sampling fields and stop sequences (/v1/completions,
// /v1/chat/completions), Petals generate fields (/api/v1/generate), or every typed field getter. A body is either
// read into values in range, or refused with a 400 ApiError whose error body (json_text) is valid JSON.
#include <cstdint>
#include <string>

#include "apps/api/json_text.hpp"
#include "apps/api/petals_messages.hpp"
#include "apps/api/request_fields.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using corolla::fuzz::require;

using namespace corolla::api;

namespace {

void read(uint8_t how, const std::string& text) {
  const nlohmann::json body = parse_json_body(text);
  switch (how % 4) {
    case 0: {
      openai_sampling(body, 1.0).validate();
      const auto stop = get_stop_sequences(body, "stop");
      require(stop.size() <= kMaxStopSequences);
      for (const auto& s : stop) require(!s.empty() && s.size() <= kMaxStopBytes);
      break;
    }
    case 1: {
      const auto g = read_petals_generate(body, 1024);
      require(!g.max_new_tokens || (*g.max_new_tokens >= 1 && *g.max_new_tokens <= 1024));
      g.sampling.validate();
      break;
    }
    case 2: petals_sampling(body).validate(); break;
    default:
      for (const auto& [key, value] : body.items()) {
        (void)value;
        try {
          get_int(body, key);
        } catch (const ApiError&) {
        }
        try {
          get_number(body, key);
        } catch (const ApiError&) {
        }
        try {
          get_bool(body, key);
        } catch (const ApiError&) {
        }
        try {
          get_string(body, key);
        } catch (const ApiError&) {
        }
      }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  try {
    read(data[0], std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  } catch (const ApiError& e) {
    require(e.status == 400);
    require(nlohmann::json::accept(json_text({{"error", {{"message", e.message}, {"param", e.param}}}})));
  }
  return 0;
}
