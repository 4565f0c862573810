#include "apps/api/api_common.hpp"

#include <charconv>
#include <cmath>
#include <ctime>
#include <limits>
#include <random>

#include "apps/api/json_text.hpp"

namespace corolla::api {

nlohmann::json openai_error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (e.status == 404 && e.param == "model") err["code"] = "model_not_found";
  if (e.status == 429) err["code"] = "too_many_sessions";
  return {{"error", err}};
}

void send_openai_error(const Responder& res, const ApiError& e) { res.json(e.status, openai_error_body(e)); }

std::string random_hex(size_t chars) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < chars; ++i) out += digits[rng() % 16];
  return out;
}

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

}  // namespace corolla::api
