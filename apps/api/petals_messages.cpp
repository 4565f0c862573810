#include "apps/api/petals_messages.hpp"

#include "apps/api/request_fields.hpp"

namespace corolla::api {

PetalsGenerate read_petals_generate(const nlohmann::json& req, int64_t max_new_tokens_limit) {
  PetalsGenerate g;
  g.inputs = get_string(req, "inputs");
  g.sampling = petals_sampling(req);
  g.max_new_tokens = get_int(req, "max_new_tokens");
  g.max_length = get_int(req, "max_length");
  if (!g.max_new_tokens && !g.max_length) throw bad_request("give max_new_tokens or max_length", "max_new_tokens");
  if (g.max_new_tokens && *g.max_new_tokens < 1)
    throw bad_request("'max_new_tokens' must be at least 1", "max_new_tokens");
  if (g.max_new_tokens && *g.max_new_tokens > max_new_tokens_limit)
    throw bad_request("'max_new_tokens' is " + std::to_string(*g.max_new_tokens) + "; this API generates at most " +
                          std::to_string(max_new_tokens_limit) + " tokens per request",
                      "max_new_tokens");
  if (g.max_length && *g.max_length < 1) throw bad_request("'max_length' must be at least 1", "max_length");
  const auto stop_list = get_stop_sequences(req, "stop_sequence");
  if (stop_list.size() > 1) throw bad_request("'stop_sequence' must be one string", "stop_sequence");
  if (!stop_list.empty()) g.stop_sequence = stop_list.front();
  g.extra_stop_sequences = get_stop_sequences(req, "extra_stop_sequences");
  if (!g.stop_sequence && !g.extra_stop_sequences.empty())
    throw bad_request("extra_stop_sequences need a stop_sequence", "extra_stop_sequences");
  return g;
}

PetalsMessage read_petals_message(const std::string& text, bool want_open, int64_t max_new_tokens_limit) {
  const nlohmann::json req = parse_json_body(text);
  const std::string type = get_string(req, "type").value_or("");
  if (want_open) {
    if (type != "open_inference_session")
      throw bad_request("the first request must be of type \"open_inference_session\", got \"" + type + "\"");
    PetalsOpen o;
    o.model = get_string(req, "model").value_or("");
    const auto max_length = get_int(req, "max_length");
    if (!max_length) throw bad_request("'max_length' is required", "max_length");
    if (*max_length < 2)
      throw bad_request("'max_length' must be at least 2, got " + std::to_string(*max_length), "max_length");
    o.max_length = *max_length;
    return o;
  }
  if (type != "generate") throw bad_request("expected a request of type \"generate\", got \"" + type + "\"");
  return read_petals_generate(req, max_new_tokens_limit);
}

}  // namespace corolla::api
