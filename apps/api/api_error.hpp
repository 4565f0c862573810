// An error for a client of the API: what every request reader throws and every handler answers with.
#pragma once

#include <string>
#include <utility>

namespace corolla::api {

// The HTTP status, a short type, and a message a person can act on.
struct ApiError {
  int status = 500;
  std::string type = "internal_error";  // invalid_request_error, not_found_error, rate_limit_error, ...
  std::string message;
  std::string param;  // the request field at fault, when one is
};

inline ApiError bad_request(std::string message, std::string param = "") {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param)};
}

}  // namespace corolla::api
