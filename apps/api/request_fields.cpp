#include "apps/api/request_fields.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include "apps/api/json_text.hpp"

namespace corolla::api {
namespace {

[[noreturn]] void wrong(const std::string& key, const std::string& what, const nlohmann::json& v) {
  std::string shown = json_text(v);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw bad_request("'" + key + "' must be " + what + ", got " + shown, key);
}

const nlohmann::json* field(const nlohmann::json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

std::optional<int64_t> get_int(const nlohmann::json& obj, const std::string& key) {
  const auto* v = field(obj, key);
  if (!v) return std::nullopt;
  // An unsigned number past int64's range would wrap to a negative one.
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw bad_request("'" + key + "' is out of range: " + json_text(*v), key);
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    int64_t out = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) return out;
  }
  wrong(key, "an integer", *v);
}

std::optional<double> get_number(const nlohmann::json& obj, const std::string& key) {
  const auto* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number()) return v->get<double>();
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    try {
      size_t used = 0;
      const double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return d;
    } catch (const std::exception&) {
    }
  }
  wrong(key, "a number", *v);
}

std::optional<bool> get_bool(const nlohmann::json& obj, const std::string& key) {
  const auto* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1)) return v->get<int64_t>() == 1;
  if (v->is_string()) {
    const auto& s = v->get_ref<const std::string&>();
    if (s == "1" || s == "true" || s == "True") return true;
    if (s == "0" || s == "false" || s == "False") return false;
  }
  wrong(key, "a boolean (true, false, 1 or 0)", *v);
}

std::optional<std::string> get_string(const nlohmann::json& obj, const std::string& key) {
  const auto* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong(key, "a string", *v);
  return v->get<std::string>();
}

std::vector<std::string> get_string_list(const nlohmann::json& obj, const std::string& key, size_t max_items) {
  const auto* v = field(obj, key);
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& item : *v) {
      if (!item.is_string()) wrong(key, "a string or an array of strings", *v);
      out.push_back(item.get<std::string>());
    }
  } else {
    wrong(key, "a string or an array of strings", *v);
  }
  if (out.size() > max_items)
    throw bad_request("'" + key + "' holds " + std::to_string(out.size()) + " items; at most " +
                          std::to_string(max_items) + " are allowed",
                      key);
  for (const auto& s : out)
    if (s.empty()) throw bad_request("'" + key + "' must not hold an empty string", key);
  return out;
}

std::vector<std::string> get_stop_sequences(const nlohmann::json& obj, const std::string& key) {
  auto out = get_string_list(obj, key, kMaxStopSequences);
  for (const auto& s : out)
    if (s.size() > kMaxStopBytes)
      throw bad_request("'" + key + "' holds a sequence of " + std::to_string(s.size()) + " bytes; at most " +
                            std::to_string(kMaxStopBytes) + " are allowed",
                        key);
  return out;
}

nlohmann::json parse_json_body(const std::string& body) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    std::string what = e.what();
    if (auto p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
    throw bad_request("malformed JSON in the request body: " + what);
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object");
  return j;
}

namespace {
// A float field: a double past float's range would make the conversion undefined.
float get_float(const nlohmann::json& obj, const std::string& key, double fallback) {
  const double d = get_number(obj, key).value_or(fallback);
  if (!(std::fabs(d) <= std::numeric_limits<float>::max()))
    throw bad_request("'" + key + "' is out of range: " + std::to_string(d), key);
  return static_cast<float>(d);
}
// top_k: 0 (off) up to int32's range.
int get_top_k(const nlohmann::json& obj, bool minus_one_is_off) {
  int64_t k = get_int(obj, "top_k").value_or(0);
  if (minus_one_is_off && k == -1) k = 0;
  if (k < 0 || k > std::numeric_limits<int32_t>::max())
    throw bad_request("'top_k' must be 0 (off) or a positive count, got " + std::to_string(k), "top_k");
  return static_cast<int>(k);
}
SamplingParams checked(SamplingParams p) {
  try {
    p.validate();
  } catch (const std::invalid_argument& e) {
    throw bad_request(e.what());
  }
  return p;
}
uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}
}  // namespace

SamplingParams openai_sampling(const nlohmann::json& body, double default_temperature) {
  SamplingParams p;
  const double t = get_number(body, "temperature").value_or(default_temperature);
  if (t < 0 || t > 2) throw bad_request("'temperature' must be in 0..2, got " + std::to_string(t), "temperature");
  p.greedy = t == 0;
  p.temperature = p.greedy ? 1.0f : static_cast<float>(t);
  const double top_p = get_number(body, "top_p").value_or(1.0);
  if (top_p <= 0 || top_p > 1) throw bad_request("'top_p' must be in (0, 1], got " + std::to_string(top_p), "top_p");
  p.top_p = static_cast<float>(top_p);
  p.top_k = get_top_k(body, true);
  p.repetition_penalty = get_float(body, "repetition_penalty", 1.0);
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (get_number(body, k).value_or(0.0) != 0.0)
      throw bad_request(std::string("'") + k + "' is not supported; use 'repetition_penalty' (1 = off)", k);
  const auto seed = get_int(body, "seed");
  p.seed = seed ? static_cast<uint64_t>(*seed) : random_seed();
  return checked(p);
}

SamplingParams petals_sampling(const nlohmann::json& body) {
  SamplingParams p;
  p.greedy = !get_bool(body, "do_sample").value_or(false);
  p.temperature = get_float(body, "temperature", 1.0);
  if (p.greedy) p.temperature = 1.0f;
  p.top_k = get_top_k(body, false);
  p.top_p = get_float(body, "top_p", 1.0);
  p.repetition_penalty = get_float(body, "repetition_penalty", 1.0);
  const auto seed = get_int(body, "seed");
  p.seed = seed ? static_cast<uint64_t>(*seed) : random_seed();
  return checked(p);
}

}  // namespace corolla::api
