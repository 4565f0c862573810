// Reading the fields of a request body (JSON values, or form and query strings in the Petals HTTP API) into
// typed values, sampling settings and stop sequences, each checked once here for every endpoint. Plain C++ over
// nlohmann::json (no actors, no HTTP): the handlers and the fuzz targets share it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "apps/api/api_error.hpp"
#include "model/sampling.hpp"

namespace corolla::api {

// Field readers: nullopt when the field is absent or null; a wrong type throws ApiError (400) naming the field.
// Numbers and booleans may also come as strings ("0.7", "1", "true"), as form fields do.
std::optional<int64_t> get_int(const nlohmann::json& obj, const std::string& key);
std::optional<double> get_number(const nlohmann::json& obj, const std::string& key);
std::optional<bool> get_bool(const nlohmann::json& obj, const std::string& key);
std::optional<std::string> get_string(const nlohmann::json& obj, const std::string& key);
// A string or an array of strings (OpenAI's "stop").
std::vector<std::string> get_string_list(const nlohmann::json& obj, const std::string& key, size_t max_items);

// Stop sequences: at most kMaxStopSequences of them, each non-empty and at most kMaxStopBytes long (the text
// stream looks back up to a stop sequence's length after every token). Throws ApiError naming `key`.
constexpr size_t kMaxStopSequences = 16;
constexpr size_t kMaxStopBytes = 256;
std::vector<std::string> get_stop_sequences(const nlohmann::json& obj, const std::string& key);

// The request body as a JSON object: 400 for malformed JSON or anything but an object.
nlohmann::json parse_json_body(const std::string& body);

// Sampling from OpenAI-style fields: temperature (0: greedy), top_p, top_k, repetition_penalty, seed (random
// when absent). `default_temperature` applies when the field is absent. Throws ApiError for bad values.
SamplingParams openai_sampling(const nlohmann::json& body, double default_temperature);
// Sampling from Petals / Hugging Face fields: do_sample (default false: greedy), temperature, top_k, top_p,
// repetition_penalty.
SamplingParams petals_sampling(const nlohmann::json& body);

}  // namespace corolla::api
