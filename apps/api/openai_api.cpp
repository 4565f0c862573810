// The OpenAI-compatible API: models, completions and chat completions, whole or streamed as server-sent events,
// with usage counts and stop sequences. Each request opens its own inference session and closes it at the end.
#include <algorithm>

#include "apps/api/api_common.hpp"
#include "apps/api/api_routes.hpp"
#include "apps/api/generation.hpp"
#include "apps/api/json_text.hpp"

namespace corolla::api {
namespace {

using nlohmann::json;

json model_json(const ApiModel& m) {
  return {{"id", m.name},
          {"object", "model"},
          {"created", m.created},
          {"owned_by", "corolla"},
          {"context_length", m.context},
          {"num_blocks", m.num_blocks},
          {"swarm_id", m.swarm_id},
          {"chat_format", std::string(to_string(m.chat.format()))}};
}

std::string message_text(const json& content, size_t index) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {  // [{"type": "text", "text": "..."}, ...]
    std::string out;
    for (const auto& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        throw bad_request("messages[" + std::to_string(index) + "].content: only text parts are supported", "messages");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  if (content.is_null()) return "";
  throw bad_request("messages[" + std::to_string(index) + "].content must be a string or an array of text parts",
                    "messages");
}

std::vector<ChatMessage> read_messages(const json& body) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    throw bad_request("'messages' is required: a non-empty array of {role, content}", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw bad_request("messages[" + std::to_string(i) + "] must be an object with a 'role'", "messages");
    std::string role = m["role"].get<std::string>();
    for (const char* k : {"tool_calls", "function_call"})
      if (m.contains(k) && !m[k].is_null() && !(m[k].is_array() && m[k].empty()))
        throw bad_request("messages[" + std::to_string(i) + "]." + k + ": tool calls are not supported", "messages");
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      throw bad_request(
          "messages[" + std::to_string(i) + "].role '" + role + "' is not supported (system, user, assistant)",
          "messages");
    out.push_back({role, message_text(m.contains("content") ? m["content"] : json(), i)});
  }
  return out;
}

// chat_template_kwargs (as vLLM reads it): the template arguments Corolla's formats take; others are refused.
ChatOptions read_chat_options(const json& body) {
  ChatOptions options;
  const auto it = body.find("chat_template_kwargs");
  if (it == body.end() || it->is_null()) return options;
  if (!it->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
  for (const auto& [key, value] : it->items())
    if (key != "enable_thinking")
      throw bad_request("chat_template_kwargs." + key + " is not supported (enable_thinking)", "chat_template_kwargs");
  options.enable_thinking = get_bool(*it, "enable_thinking").value_or(true);
  return options;
}

// What a request asks, checked, before any session is opened.
struct Plan {
  std::shared_ptr<ApiModel> model;
  std::vector<int32_t> prompt;
  std::string echo_text;
  int64_t max_tokens = 0;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
  bool ignore_eos = false;  // extension (as vLLM's): generate max_tokens whatever the model says, for benchmarks
};

int64_t choose_max_tokens(const Engine& engine, const json& body, const ApiModel& m, int64_t prompt_len,
                          int64_t fallback) {
  auto asked = get_int(body, "max_completion_tokens");
  if (!asked) asked = get_int(body, "max_tokens");
  const int64_t limit = engine.config().max_new_tokens;
  if (asked) {
    const std::string key = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (*asked < 1) throw bad_request("'" + key + "' must be at least 1", key);
    if (*asked > limit)
      throw bad_request("'" + key + "' is " + std::to_string(*asked) + "; this API generates at most " +
                            std::to_string(limit) + " tokens per request",
                        key);
    if (prompt_len + *asked > m.context)
      throw bad_request("this model's maximum context length is " + std::to_string(m.context) +
                            " tokens; you asked for " + std::to_string(prompt_len + *asked) + " (" +
                            std::to_string(prompt_len) + " in the prompt, " + std::to_string(*asked) +
                            " in the completion)",
                        key);
    return *asked;
  }
  if (prompt_len >= m.context)
    throw bad_request("the prompt is " + std::to_string(prompt_len) +
                          " tokens; this model's maximum context length is " + std::to_string(m.context) + " tokens",
                      "messages");
  return std::min(fallback, m.context - prompt_len);
}

void common_fields(const json& body, Plan& p) {
  if (auto n = get_int(body, "n"); n && *n != 1) throw bad_request("only n = 1 is supported", "n");
  for (const char* k : {"logprobs", "top_logprobs", "best_of", "suffix", "tools", "functions", "response_format"}) {
    auto it = body.find(k);
    if (it != body.end() && !it->is_null() && *it != json(false) && !(std::string(k) == "best_of" && *it == json(1)))
      throw bad_request(std::string("'") + k + "' is not supported", k);
  }
  p.stop = get_stop_sequences(body, "stop");
  p.stream = get_bool(body, "stream").value_or(false);
  p.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  if (auto it = body.find("stream_options"); it != body.end() && it->is_object())
    p.include_usage = get_bool(*it, "include_usage").value_or(false);
}

json usage_json(int64_t prompt, int64_t completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

// Opens a session, runs the job and answers: one JSON body, or server-sent events. `chunk_json(text, finish)`
// builds one streamed chunk; `whole_json(result)` the whole answer.
void run(Engine& engine, const Responder& res, Plan plan,
         std::function<json(const std::string& text, const json& finish_reason)> chunk_json,
         std::function<json(const GenResult&)> whole_json, std::function<json()> first_chunk) {
  ApiError err;
  Engine::Slot slot = engine.acquire_slot(&err);
  if (!slot) return send_openai_error(res, err);
  auto session = std::make_shared<GenerationSession>(engine, plan.model);
  auto job = std::make_shared<GenJob>();
  job->input = plan.prompt;
  job->sampling = plan.sampling;
  job->max_new_tokens = plan.max_tokens;
  for (const auto& s : plan.stop) job->stops.push_back({s, -1});
  job->trim_stop = true;
  job->skip_special = true;
  job->stop_at_eos = !plan.ignore_eos;
  const int64_t prompt_len = static_cast<int64_t>(plan.prompt.size());
  // Frees the slot before the answer goes out, so a client's next request finds it free.
  auto slot_box = std::make_shared<Engine::Slot>(std::move(slot));
  auto finish = [session, slot_box] {
    session->close();
    slot_box->reset();
  };
  auto finish_reason = [](const GenResult& r) { return r.finish_reason == "length" ? "length" : "stop"; };
  if (plan.stream) {
    // Started once the session is open, so that open errors are plain HTTP errors.
    auto sse_holder = std::make_shared<std::shared_ptr<SseStream>>();
    job->on_chunk = [sse_holder, chunk_json](const std::string& text, int64_t) {
      if (!text.empty()) (*sse_holder)->event(json_text(chunk_json(text, nullptr)));
    };
    job->on_done = [=](const GenResult& r) {
      finish();
      auto& s = *sse_holder;
      if (!r.last_text.empty()) s->event(json_text(chunk_json(r.last_text, nullptr)));
      s->event(json_text(chunk_json("", finish_reason(r))));
      if (plan.include_usage) {
        json u = chunk_json("", nullptr);
        u["choices"] = json::array();
        u["usage"] = usage_json(prompt_len, r.completion_tokens);
        s->event(json_text(u));
      }
      s->event("[DONE]");
      s->end();
    };
    job->on_error = [=](const ApiError& e) {
      finish();
      (*sse_holder)->event(json_text(openai_error_body(e)));
      (*sse_holder)->event("[DONE]");
      (*sse_holder)->end();
    };
    auto cancelled = job->cancelled;
    session->open(prompt_len + plan.max_tokens, [=](const ApiError* e) {
      if (e) {
        finish();
        return send_openai_error(res, *e);
      }
      *sse_holder = res.start_sse();
      (*sse_holder)->on_gone([cancelled] { cancelled->store(true); });
      (*sse_holder)->event(json_text(first_chunk()));
      session->run(job);
    });
  } else {
    job->on_done = [=](const GenResult& r) {
      finish();
      res.json(200, whole_json(r));
    };
    job->on_error = [=](const ApiError& e) {
      finish();
      send_openai_error(res, e);
    };
    session->open(prompt_len + plan.max_tokens, [=](const ApiError* e) {
      if (e) {
        finish();
        return send_openai_error(res, *e);
      }
      session->run(job);
    });
  }
}

template <class F>
void guarded(const Responder& res, F f) {
  try {
    f();
  } catch (const ApiError& e) {
    send_openai_error(res, e);
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected JSON type that a reader did not check: the request's fault, not the server's.
    send_openai_error(res, bad_request(std::string("malformed request: ") + e.what()));
  }
}

void chat_completions(Engine& engine, const Request& req, const Responder& res) {
  guarded(res, [&] {
    const json body = parse_json_body(req.body());
    Plan p;
    ApiError err;
    p.model = engine.find(get_string(body, "model").value_or(""), &err);
    if (!p.model) throw err;
    const auto messages = read_messages(body);
    try {
      p.prompt = p.model->tokenizer.encode(p.model->chat.render(messages, true, read_chat_options(body)),
                                           {.add_special = false, .parse_special = true});
    } catch (const std::invalid_argument& e) {
      throw bad_request(std::string("messages: ") + e.what(), "messages");
    }
    common_fields(body, p);
    p.sampling = openai_sampling(body, 1.0);
    p.max_tokens = choose_max_tokens(engine, body, *p.model, static_cast<int64_t>(p.prompt.size()),
                                     engine.config().default_max_tokens);
    const std::string id = "chatcmpl-" + random_hex(24);
    const int64_t created = unix_time();
    const std::string model = p.model->name;
    const int64_t prompt_len = static_cast<int64_t>(p.prompt.size());
    auto chunk = [=](const std::string& text, const json& finish) {
      json delta = json::object();
      if (!text.empty()) delta["content"] = text;
      return json{{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", model},
                  {"choices",
                   json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    };
    auto first = [=] {
      json c = chunk("", nullptr);
      c["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      return c;
    };
    auto whole = [=](const GenResult& r) {
      return json{{"id", id},
                  {"object", "chat.completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({{{"index", 0},
                                            {"message", {{"role", "assistant"}, {"content", r.text}}},
                                            {"logprobs", nullptr},
                                            {"finish_reason", r.finish_reason == "length" ? "length" : "stop"}}})},
                  {"usage", usage_json(prompt_len, r.completion_tokens)}};
    };
    run(engine, res, std::move(p), chunk, whole, first);
  });
}

void completions(Engine& engine, const Request& req, const Responder& res) {
  guarded(res, [&] {
    const json body = parse_json_body(req.body());
    Plan p;
    ApiError err;
    p.model = engine.find(get_string(body, "model").value_or(""), &err);
    if (!p.model) throw err;
    const auto& tok = p.model->tokenizer;
    auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) throw bad_request("'prompt' is required", "prompt");
    json prompt = *it;
    if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array()))
      prompt = prompt[0];
    else if (prompt.is_array() && !prompt.empty() && !prompt[0].is_number_integer())
      throw bad_request("only one prompt per request is supported", "prompt");
    if (prompt.is_string()) {
      const std::string text = prompt.get<std::string>();
      try {
        p.prompt = tok.encode(text, {.add_special = true, .parse_special = true});
      } catch (const std::invalid_argument& e) {
        throw bad_request(std::string("prompt: ") + e.what(), "prompt");
      }
      p.echo_text = text;
    } else if (prompt.is_array()) {
      for (const auto& v : prompt) {
        if (!v.is_number_integer()) throw bad_request("'prompt' as an array must hold token ids", "prompt");
        const int64_t id = v.get<int64_t>();
        if (id < 0 || id >= p.model->head->config().vocab_size)
          throw bad_request("prompt token id " + std::to_string(id) + " is outside the vocabulary (" +
                                std::to_string(p.model->head->config().vocab_size) + " tokens)",
                            "prompt");
        p.prompt.push_back(static_cast<int32_t>(id));
      }
      p.echo_text = tok.decode(p.prompt);
    } else {
      throw bad_request("'prompt' must be a string or an array of token ids", "prompt");
    }
    if (p.prompt.empty()) throw bad_request("the prompt is empty", "prompt");
    common_fields(body, p);
    const bool echo = get_bool(body, "echo").value_or(false);
    p.sampling = openai_sampling(body, 1.0);
    p.max_tokens = choose_max_tokens(engine, body, *p.model, static_cast<int64_t>(p.prompt.size()), 16);
    const std::string id = "cmpl-" + random_hex(24);
    const int64_t created = unix_time();
    const std::string model = p.model->name;
    const int64_t prompt_len = static_cast<int64_t>(p.prompt.size());
    const std::string echo_text = echo ? p.echo_text : "";
    auto chunk = [=](const std::string& text, const json& finish) {
      return json{
          {"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}})}};
    };
    auto first = [=] { return chunk(echo_text, nullptr); };
    auto whole = [=](const GenResult& r) {
      return json{{"id", id},
                  {"object", "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({{{"index", 0},
                                            {"text", echo_text + r.text},
                                            {"logprobs", nullptr},
                                            {"finish_reason", r.finish_reason == "length" ? "length" : "stop"}}})},
                  {"usage", usage_json(prompt_len, r.completion_tokens)}};
    };
    run(engine, res, std::move(p), chunk, whole, first);
  });
}

}  // namespace

void add_openai_routes(HttpServer& server, Engine& engine) {
  server.route(http::verb::get, "/v1/models", [&engine](const Request&, const Responder& res) {
    json data = json::array();
    for (const auto& m : engine.models()) data.push_back(model_json(*m));
    res.json(200, {{"object", "list"}, {"data", data}});
  });
  for (const auto& m : engine.models())
    server.route(http::verb::get, "/v1/models/" + m->name,
                 [m](const Request&, const Responder& res) { res.json(200, model_json(*m)); });
  server.route(http::verb::post, "/v1/chat/completions",
               [&engine](const Request& req, const Responder& res) { chat_completions(engine, req, res); });
  server.route(http::verb::post, "/v1/completions",
               [&engine](const Request& req, const Responder& res) { completions(engine, req, res); });
}

}  // namespace corolla::api
