// The one way the API turns JSON into text for a client. Strings in a reply can hold bytes a client sent
// (a model name, a field's value quoted in an error, text the model drew): nlohmann's dump() throws on invalid
// UTF-8, and an exception in a reply path would end the process, so invalid bytes become U+FFFD instead.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace corolla::api {

inline std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace corolla::api
