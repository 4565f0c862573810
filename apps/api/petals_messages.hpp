// The requests of chat.petals.dev's API as plain values: a WebSocket message of /api/v2/generate, or the fields
// of POST /api/v1/generate, read and checked without a model or a session. The handlers and the fuzz targets
// (tests/fuzz/fuzz_api_ws_messages.cpp, fuzz_api_requests.cpp) share these readers, so one check serves both.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "apps/api/api_error.hpp"
#include "model/sampling.hpp"

namespace corolla::api {

// {type: "open_inference_session", model, max_length}
struct PetalsOpen {
  std::string model;   // empty: the first model
  int64_t max_length;  // >= 2 (the model's context is checked when the model is known)
};

// {type: "generate", inputs, max_new_tokens | max_length, sampling fields, stop_sequence, extra_stop_sequences}
struct PetalsGenerate {
  std::optional<std::string> inputs;
  std::optional<int64_t> max_new_tokens;  // 1..the API's max_new_tokens
  std::optional<int64_t> max_length;      // >= 1; at least one of the two is given
  SamplingParams sampling;
  std::optional<std::string> stop_sequence;
  std::vector<std::string> extra_stop_sequences;  // only with stop_sequence
};

using PetalsMessage = std::variant<PetalsOpen, PetalsGenerate>;

// One WebSocket message: `want_open` while the socket has no session yet (the first must open one). Throws
// ApiError (400) for malformed JSON, a wrong type, or a field of the wrong kind or range.
PetalsMessage read_petals_message(const std::string& text, bool want_open, int64_t max_new_tokens_limit);
// The generate fields of a JSON object (a WebSocket message, or /api/v1/generate's fields). Throws ApiError.
PetalsGenerate read_petals_generate(const nlohmann::json& req, int64_t max_new_tokens_limit);

}  // namespace corolla::api
