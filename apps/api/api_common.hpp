// Helpers the API families share: error bodies and completion ids (request fields: request_fields.hpp).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/api/engine.hpp"
#include "apps/api/http_server.hpp"
#include "apps/api/request_fields.hpp"
#include "model/sampling.hpp"

namespace corolla::api {

// {"error": {"message", "type", "param", "code"}}, OpenAI's shape.
nlohmann::json openai_error_body(const ApiError& e);
void send_openai_error(const Responder& res, const ApiError& e);

// A random id suffix (hex) for completion ids.
std::string random_hex(size_t chars);
int64_t unix_time();

}  // namespace corolla::api
