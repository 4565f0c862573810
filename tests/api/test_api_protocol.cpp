// The HTTP and WebSocket API against a swarm in this process (a DHT node and two servers splitting the tiny
// golden Llama, found through the DHT), over real sockets: every endpoint, the generation settings, stop
// sequences and usage counts, the Petals session protocol, errors (the server stays up), the session limit and
// 32 concurrent chats.
#define BOOST_TEST_MODULE api_protocol
#include <boost/test/unit_test.hpp>
#include <caf/all.hpp>
#include <future>
#include <sstream>
#include <thread>

#include "actors/net/connector.hpp"
#include "actors/system/system_config.hpp"
#include "apps/api/api_server.hpp"
#include "apps/api/http_server.hpp"
#include "apps/api/local_swarm.hpp"
#include "model/local_model.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/weights/weight_source.hpp"
#include "support/golden.hpp"
#include "support/http_client.hpp"

using namespace corolla;
using namespace corolla::test;
using nlohmann::json;
namespace http = boost::beast::http;

namespace {

const std::string kTokenizer = std::string(COROLLA_TEST_DATA) + "/tokenizers/bpe-tiny256";

api::ApiConfig api_config(const std::string& peer, int64_t max_sessions) {
  api::ApiConfig c;
  c.port = 0;
  c.initial_peers = {peer};
  c.max_sessions = max_sessions;
  c.max_length = 256;
  c.max_new_tokens = 64;
  c.default_max_tokens = 16;
  c.state_ttl_s = 0;
  c.models.push_back({"tiny", model_dir("llama"), kTokenizer, ""});
  return c;
}

// One swarm and API for the whole suite (starting them takes a moment); a second API on the same swarm allows
// only two sessions.
struct World {
  corolla_config cfg;
  caf::actor_system sys{cfg};
  caf::actor connector = spawn_connector(sys);
  std::unique_ptr<api::LocalSwarm> swarm;
  std::unique_ptr<api::ApiServer> server, small;
  uint16_t port = 0, small_port = 0;
  Tokenizer tokenizer = Tokenizer::load(kTokenizer);

  World() {
    api::LocalSwarmOptions o;
    o.model = model_dir("llama");
    o.servers = 2;
    o.publish = false;
    o.cache_tokens = 16384;
    o.threads = 1;
    swarm = std::make_unique<api::LocalSwarm>(sys, connector, o);
    server = std::make_unique<api::ApiServer>(sys, api_config(swarm->dht_address(), 40), connector);
    port = server->start(2);
    small = std::make_unique<api::ApiServer>(sys, api_config(swarm->dht_address(), 2), connector);
    small_port = small->start(1);
  }
  ~World() {
    small->stop();
    server->stop();
    small.reset();
    server.reset();
    swarm->stop();
    caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
  }
};

// Made and destroyed inside main (a function-local static would outlive the actor system's own statics).
World* the_world = nullptr;
struct WorldFixture {
  void setup() { the_world = new World; }
  void teardown() {
    delete the_world;
    the_world = nullptr;
  }
};
World& world() { return *the_world; }

uint16_t port() { return world().port; }

json completion(json body) {
  auto r = post_json(port(), "/v1/completions", body);
  BOOST_REQUIRE_MESSAGE(r.status == 200, r.body);
  return r.json();
}

std::vector<int32_t> golden_prompt() { return Golden("llama").ids("input_ids"); }

// The streamed text of an SSE reply, and its last non-usage chunk.
struct Streamed {
  std::string text;
  json finish_reason;
  json usage;
  bool done = false;
  int content_chunks = 0;
  std::string error;  // the first event that carried an error
};
// The stream's events gathered, with no Boost.Test assertion: its log is not thread-safe, and the concurrent-chat
// test parses streams on 32 threads (a checkpoint set from two threads at once threw std::length_error).
Streamed parse_stream(const HttpReply& r, const char* field) {
  Streamed s;
  for (const auto& ev : r.events()) {
    if (ev == "[DONE]") {
      s.done = true;
      continue;
    }
    const json c = json::parse(ev);
    if (c.contains("error")) {
      if (s.error.empty()) s.error = ev;
      continue;
    }
    if (c.contains("usage")) s.usage = c["usage"];
    if (c["choices"].empty()) continue;
    const json& ch = c["choices"][0];
    std::string piece;
    if (std::string(field) == "text")
      piece = ch["text"].get<std::string>();
    else if (ch["delta"].contains("content"))
      piece = ch["delta"]["content"].get<std::string>();
    if (!piece.empty()) s.content_chunks++;
    s.text += piece;
    if (!ch["finish_reason"].is_null()) s.finish_reason = ch["finish_reason"];
  }
  return s;
}

// parse_stream on the test's own thread, requiring that no event carried an error.
Streamed read_stream(const HttpReply& r, const char* field) {
  Streamed s = parse_stream(r, field);
  BOOST_REQUIRE_MESSAGE(s.error.empty(), s.error);
  return s;
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(WorldFixture);

BOOST_AUTO_TEST_CASE(models_are_listed) {
  auto r = get(port(), "/v1/models");
  BOOST_TEST(r.status == 200);
  auto j = r.json();
  BOOST_TEST(j["object"] == "list");
  BOOST_REQUIRE(j["data"].size() == 1u);
  BOOST_TEST(j["data"][0]["id"] == "tiny");
  BOOST_TEST(j["data"][0]["num_blocks"] == 4);
  BOOST_TEST(j["data"][0]["context_length"] == 256);
  BOOST_TEST(get(port(), "/v1/models/tiny").json()["id"] == "tiny");
  BOOST_TEST(get(port(), "/v1/models/nope").status == 404);
}

BOOST_AUTO_TEST_CASE(greedy_completion_through_the_swarm_matches_the_golden_tokens) {
  const auto want = Golden("llama").ids("greedy_ids");
  auto j = completion({{"model", "tiny"}, {"prompt", golden_prompt()}, {"max_tokens", 32}, {"temperature", 0}});
  BOOST_TEST(j["object"] == "text_completion");
  BOOST_TEST(j["choices"][0]["text"] == world().tokenizer.decode(want, true));
  BOOST_TEST(j["choices"][0]["finish_reason"] == "length");
  BOOST_TEST(j["usage"]["prompt_tokens"] == golden_prompt().size());
  BOOST_TEST(j["usage"]["completion_tokens"] == 32);
  BOOST_TEST(j["usage"]["total_tokens"] == golden_prompt().size() + 32);
}

BOOST_AUTO_TEST_CASE(streamed_completion_equals_the_whole_one) {
  json body = {{"model", "tiny"}, {"prompt", golden_prompt()}, {"max_tokens", 24}, {"temperature", 0}};
  const auto whole = completion(body);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = post_json(port(), "/v1/completions", body);
  BOOST_TEST(r.status == 200);
  BOOST_TEST(r.content_type == "text/event-stream");
  auto s = read_stream(r, "text");
  BOOST_TEST(s.done);
  BOOST_TEST(s.text == whole["choices"][0]["text"].get<std::string>());
  BOOST_TEST(s.finish_reason == "length");
  BOOST_TEST(s.usage["completion_tokens"] == 24);
  BOOST_TEST(s.content_chunks > 5);  // streamed as it came, not in one piece
}

BOOST_AUTO_TEST_CASE(stop_sequences_end_the_text_before_them_streamed_or_not) {
  const auto ids = Golden("llama").ids("greedy_ids");
  const std::string full = world().tokenizer.decode(ids, true);
  // A stop sequence taken from the middle of the greedy text: two ASCII characters after byte 12.
  std::string stop;
  for (size_t i = 12; i + 2 < full.size() && stop.empty(); ++i)
    if (static_cast<unsigned char>(full[i]) < 0x80 && static_cast<unsigned char>(full[i + 1]) < 0x80 && full[i] != ' ')
      stop = full.substr(i, 2);
  BOOST_REQUIRE(!stop.empty());
  const std::string want = full.substr(0, full.find(stop));
  size_t tokens = 0;  // tokens drawn until the stop sequence appears
  while (world().tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.begin() + tokens + 1), true).find(stop) ==
         std::string::npos)
    ++tokens;
  ++tokens;
  json body = {{"model", "tiny"},
               {"prompt", golden_prompt()},
               {"max_tokens", 32},
               {"temperature", 0},
               {"stop", {"never-appears", stop}}};
  auto j = completion(body);
  BOOST_TEST(j["choices"][0]["text"] == want);
  BOOST_TEST(j["choices"][0]["finish_reason"] == "stop");
  BOOST_TEST(j["usage"]["completion_tokens"] == tokens);
  body["stream"] = true;
  auto s = read_stream(post_json(port(), "/v1/completions", body), "text");
  BOOST_TEST(s.text == want);  // nothing of the stop sequence leaked, even in pieces
  BOOST_TEST(s.finish_reason == "stop");
}

BOOST_AUTO_TEST_CASE(chat_completion_renders_the_template_and_counts_usage) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}};
  auto r = post_json(port(), "/v1/chat/completions",
                     {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
  BOOST_REQUIRE_MESSAGE(r.status == 200, r.body);
  auto j = r.json();
  BOOST_TEST(j["object"] == "chat.completion");
  BOOST_TEST(j["choices"][0]["message"]["role"] == "assistant");
  // "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
  const size_t prompt = world()
                            .tokenizer
                            .encode(
                                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                                "<|im_start|>assistant\n",
                                {.add_special = false, .parse_special = true})
                            .size();
  BOOST_TEST(j["usage"]["prompt_tokens"] == prompt);
  BOOST_TEST(j["usage"]["completion_tokens"].get<int>() <= 8);
  // Template arguments (vLLM's chat_template_kwargs): Qwen3's enable_thinking, which ChatML ignores.
  auto k = post_json(port(), "/v1/chat/completions",
                     {{"model", "tiny"},
                      {"messages", messages},
                      {"max_tokens", 1},
                      {"chat_template_kwargs", {{"enable_thinking", false}}}});
  BOOST_REQUIRE_MESSAGE(k.status == 200, k.body);
  BOOST_TEST(k.json()["usage"]["prompt_tokens"] == prompt);
  // Streamed: a first chunk with the role, then content, then the finish reason and [DONE].
  auto s =
      post_json(port(), "/v1/chat/completions",
                {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}});
  auto events = s.events();
  BOOST_REQUIRE(events.size() >= 3u);
  BOOST_TEST(json::parse(events[0])["choices"][0]["delta"]["role"] == "assistant");
  BOOST_TEST(events.back() == "[DONE]");
  BOOST_TEST(read_stream(s, "delta").text == j["choices"][0]["message"]["content"].get<std::string>());
}

// A job is one generation of the session (model/generation.hpp): a seeded completion draws the tokens that the
// same generation draws in one process.
BOOST_AUTO_TEST_CASE(a_seeded_completion_draws_what_generate_draws) {
  GenerationParams params;
  params.max_new_tokens = 24;
  params.stop_at_eos = false;
  params.sampling = {.greedy = false, .temperature = 1.5f, .top_k = 50, .top_p = 0.95f, .seed = 11};
  auto backend = make_cpu_backend();
  LocalModel local(open_weights(model_dir("llama")), *backend);
  const auto ids = generate(local, golden_prompt(), params);
  const json body = {{"model", "tiny"},  {"prompt", golden_prompt()},
                     {"max_tokens", 24}, {"temperature", 1.5},
                     {"top_k", 50},      {"top_p", 0.95},
                     {"seed", 11},       {"ignore_eos", true}};
  const json answer = completion(body);
  BOOST_TEST(answer["usage"]["completion_tokens"] == 24);
  BOOST_TEST(answer["choices"][0]["text"].get<std::string>() == world().tokenizer.decode(ids, true));
}

BOOST_AUTO_TEST_CASE(sampling_settings_take_effect_and_seeds_repeat) {
  json body = {{"model", "tiny"},  {"prompt", golden_prompt()},
               {"max_tokens", 24}, {"temperature", 1.5},
               {"top_k", 50},      {"top_p", 0.95},
               {"seed", 7}};
  const auto a = completion(body)["choices"][0]["text"];
  BOOST_TEST(completion(body)["choices"][0]["text"] == a);  // same seed, same text
  body["seed"] = 8;
  const auto b = completion(body)["choices"][0]["text"];
  body["seed"] = 9;
  const auto c = completion(body)["choices"][0]["text"];
  BOOST_TEST((a != b || a != c));
  const auto greedy =
      completion({{"model", "tiny"}, {"prompt", golden_prompt()}, {"max_tokens", 24}, {"temperature", 0}});
  BOOST_TEST((a != greedy["choices"][0]["text"] || b != greedy["choices"][0]["text"]));
  // top_k = 1 is greedy whatever the temperature.
  body["top_k"] = 1;
  BOOST_TEST(completion(body)["choices"][0]["text"] == greedy["choices"][0]["text"]);
  // A strong repetition penalty changes the greedy text.
  const auto penalised = completion({{"model", "tiny"},
                                     {"prompt", golden_prompt()},
                                     {"max_tokens", 24},
                                     {"temperature", 0},
                                     {"repetition_penalty", 5.0}});
  BOOST_TEST(penalised["choices"][0]["text"] != greedy["choices"][0]["text"]);
}

BOOST_AUTO_TEST_CASE(petals_websocket_session_keeps_the_conversation) {
  const std::string inputs = "Once upon a time";
  auto one_shot = [&](int64_t n) {
    WsClient ws(port(), "/api/v2/generate");
    ws.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 128}});
    BOOST_TEST(ws.read() == json({{"ok", true}}));
    ws.send({{"type", "generate"}, {"inputs", inputs}, {"max_new_tokens", n}});
    auto r = ws.read();
    BOOST_TEST(r["ok"] == true);
    BOOST_TEST(r["stop"] == true);
    BOOST_TEST(r["token_count"] == n);
    return r["outputs"].get<std::string>();
  };
  const std::string sixteen = one_shot(16);
  // Two generate requests of 8 in one session continue each other.
  WsClient ws(port(), "/api/v2/generate");
  ws.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 128}});
  BOOST_TEST(ws.read()["ok"] == true);
  ws.send({{"type", "generate"}, {"inputs", inputs}, {"max_new_tokens", 8}});
  auto first = ws.read();
  ws.send({{"type", "generate"}, {"max_new_tokens", 8}});
  auto second = ws.read();
  BOOST_TEST(first["outputs"].get<std::string>() + second["outputs"].get<std::string>() == sixteen);
  // The HTTP API gives the same text.
  auto h = http_request(port(), http::verb::post, "/api/v1/generate",
                        "model=tiny&inputs=Once+upon+a+time&max_new_tokens=16", "application/x-www-form-urlencoded");
  BOOST_REQUIRE_MESSAGE(h.status == 200, h.body);
  BOOST_TEST(h.json()["ok"] == true);
  BOOST_TEST(h.json()["outputs"] == sixteen);
  auto hj = post_json(port(), "/api/v1/generate", {{"model", "tiny"}, {"inputs", inputs}, {"max_new_tokens", 16}});
  BOOST_TEST(hj.json()["outputs"] == sixteen);
}

BOOST_AUTO_TEST_CASE(petals_websocket_streams_until_the_stop_sequence_or_the_session_is_full) {
  // Token by token (max_new_tokens 1) with a stop sequence that never comes: replies until the session's
  // max_length, then Petals' "Maximum length exceeded" error.
  WsClient ws(port(), "/api/v2/generate");
  ws.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 24}});
  BOOST_TEST(ws.read()["ok"] == true);
  ws.send({{"type", "generate"}, {"inputs", "Hi"}, {"max_new_tokens", 1}, {"stop_sequence", "never-appears"}});
  int replies = 0, tokens = 0;
  json r;
  for (;;) {
    r = ws.read();
    BOOST_REQUIRE(!r.is_null());
    if (r["ok"] != true) break;
    BOOST_TEST(r["stop"] == false);
    replies++;
    tokens += r["token_count"].get<int>();
  }
  BOOST_TEST(r["traceback"].get<std::string>().find("Maximum length exceeded") != std::string::npos, r.dump());
  // "Hi" is two tokens; as in Petals the session holds 24 fed tokens and the token drawn after the last of them
  // still comes back: 23 tokens drawn, of which the last few may still be waiting for the rest of a character when
  // the error comes.
  BOOST_TEST(tokens <= 23);
  BOOST_TEST(tokens >= 20);
  BOOST_TEST(replies >= tokens / 2);  // a reply waits while a character is incomplete
  BOOST_TEST(ws.read().is_null());    // then the socket closes
}

BOOST_AUTO_TEST_CASE(petals_stop_sequence_ends_the_stream) {
  // The greedy text of a fresh session, then the same with a stop sequence cut from it: the stream ends at it.
  WsClient ws(port(), "/api/v2/generate");
  ws.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 128}});
  BOOST_TEST(ws.read()["ok"] == true);
  ws.send({{"type", "generate"}, {"inputs", "abc"}, {"max_new_tokens", 20}});
  const std::string text = ws.read()["outputs"];
  std::string stop;
  for (size_t i = 6; i + 1 < text.size() && stop.empty(); ++i)
    if (static_cast<unsigned char>(text[i]) < 0x80 && text[i] != ' ') stop = text.substr(i, 1);
  BOOST_REQUIRE(!stop.empty());
  WsClient ws2(port(), "/api/v2/generate");
  ws2.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 128}});
  BOOST_TEST(ws2.read()["ok"] == true);
  ws2.send({{"type", "generate"}, {"inputs", "abc"}, {"max_new_tokens", 1}, {"stop_sequence", stop}});
  std::string got;
  for (;;) {
    auto r = ws2.read();
    BOOST_REQUIRE(r["ok"] == true);
    got += r["outputs"].get<std::string>();
    if (r["stop"] == true) break;
  }
  BOOST_TEST(got == text.substr(0, text.find(stop) + stop.size()));  // Petals keeps the stop sequence
}

BOOST_AUTO_TEST_CASE(petals_errors_are_ok_false_with_a_traceback) {
  auto first_reply = [](const json& open, const std::string& raw = "") {
    WsClient ws(port(), "/api/v2/generate");
    if (raw.empty())
      ws.send(open);
    else
      ws.send_text(raw);
    auto r = ws.read();
    BOOST_TEST(ws.read().is_null());  // closed after the error
    return r;
  };
  auto r = first_reply({}, "{not json");
  BOOST_TEST(r["ok"] == false);
  BOOST_TEST(r["traceback"].get<std::string>().find("malformed JSON") != std::string::npos);
  r = first_reply({{"type", "generate"}, {"inputs", "x"}});
  BOOST_TEST(r["traceback"].get<std::string>().find("open_inference_session") != std::string::npos);
  r = first_reply({{"type", "open_inference_session"}, {"model", "nope"}, {"max_length", 64}});
  BOOST_TEST(r["traceback"].get<std::string>().find("unknown model 'nope'") != std::string::npos);
  r = first_reply({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 100000}});
  BOOST_TEST(r["traceback"].get<std::string>().find("max_length") != std::string::npos);
  // A bad generate request after a good open.
  WsClient ws(port(), "/api/v2/generate");
  ws.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 64}});
  BOOST_TEST(ws.read()["ok"] == true);
  ws.send({{"type", "generate"},
           {"inputs", "x"},
           {"max_new_tokens", 1},
           {"stop_sequence", "two tokens"},
           {"extra_stop_sequences", {"\n"}}});
  r = ws.read();
  BOOST_TEST(r["ok"] == false);
  BOOST_TEST(r["traceback"].get<std::string>().find("exactly 1 token") != std::string::npos);
  // HTTP API errors carry a 4xx status.
  auto h = http_request(port(), http::verb::post, "/api/v1/generate", "model=tiny&max_new_tokens=4",
                        "application/x-www-form-urlencoded");
  BOOST_TEST(h.status == 400);
  BOOST_TEST(h.json()["ok"] == false);
  h = http_request(port(), http::verb::post, "/api/v1/generate", "model=x&inputs=a&max_new_tokens=4",
                   "application/x-www-form-urlencoded");
  BOOST_TEST(h.status == 404);
  h = http_request(port(), http::verb::post, "/api/v1/generate", "model=tiny&inputs=a&max_new_tokens=99999",
                   "application/x-www-form-urlencoded");
  BOOST_TEST(h.status == 400);
}

BOOST_AUTO_TEST_CASE(bad_requests_get_4xx_with_a_message_and_the_server_stays_up) {
  auto expect = [](const HttpReply& r, int status, const std::string& fragment) {
    BOOST_TEST(r.status == status, r.body);
    BOOST_TEST(r.json()["error"]["message"].get<std::string>().find(fragment) != std::string::npos, r.body);
  };
  const json msgs = {{{"role", "user"}, {"content", "hi"}}};
  expect(http_request(port(), http::verb::post, "/v1/chat/completions", "{\"model\": "), 400, "malformed JSON");
  expect(http_request(port(), http::verb::post, "/v1/chat/completions", "[1, 2]"), 400, "JSON object");
  expect(post_json(port(), "/v1/chat/completions", {{"model", "gpt-4"}, {"messages", msgs}}), 404,
         "unknown model 'gpt-4'");
  expect(post_json(port(), "/v1/chat/completions", {{"model", "tiny"}, {"messages", msgs}, {"max_tokens", 100000}}),
         400, "at most 64 tokens");
  expect(
      post_json(port(), "/v1/completions", {{"model", "tiny"}, {"prompt", std::string(300, 'a')}, {"max_tokens", 8}}),
      400, "maximum context length is 256");
  expect(post_json(port(), "/v1/chat/completions", {{"model", "tiny"}}), 400, "'messages' is required");
  expect(post_json(port(), "/v1/chat/completions", {{"model", "tiny"}, {"messages", msgs}, {"temperature", "hot"}}),
         400, "'temperature' must be a number");
  expect(post_json(port(), "/v1/chat/completions", {{"model", "tiny"}, {"messages", msgs}, {"n", 2}}), 400, "n = 1");
  expect(post_json(port(), "/v1/chat/completions",
                   {{"model", "tiny"}, {"messages", {{{"role", "tool"}, {"content", "x"}}}}}),
         400, "role 'tool'");
  const json call = {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}}};
  expect(
      post_json(port(), "/v1/chat/completions",
                {{"model", "tiny"},
                 {"messages", {{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"tool_calls", call}}}}}),
      400, "messages[1].tool_calls: tool calls are not supported");
  expect(post_json(port(), "/v1/chat/completions",
                   {{"model", "tiny"}, {"messages", msgs}, {"chat_template_kwargs", {{"tools_on", true}}}}),
         400, "chat_template_kwargs.tools_on is not supported");
  expect(post_json(port(), "/v1/chat/completions",
                   {{"model", "tiny"}, {"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", "maybe"}}}}),
         400, "enable_thinking");
  expect(post_json(port(), "/v1/completions", {{"model", "tiny"}, {"prompt", {1, 2, 999}}}), 400,
         "outside the vocabulary");
  expect(post_json(port(), "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"stop", {1}}}), 400, "'stop'");
  expect(get(port(), "/v1/nothing"), 404, "no such endpoint");
  expect(get(port(), "/v1/chat/completions"), 405, "not allowed");
  expect(http_request(port(), http::verb::post, "/v1/completions", std::string(2 << 20, ' ')), 413, "over 1 MiB");
  // Still serving (greedy: a sampled first token is the tiny model's end of text about once in twenty).
  BOOST_TEST(get(port(), "/v1/models").status == 200);
  BOOST_TEST(
      completion(
          {{"model", "tiny"}, {"prompt", "ok"}, {"max_tokens", 2}, {"temperature", 0}})["usage"]["completion_tokens"] ==
      2);
}

BOOST_AUTO_TEST_CASE(too_many_sessions_are_refused_until_one_closes) {
  const uint16_t small = world().small_port;
  auto a = std::make_unique<WsClient>(small, "/api/v2/generate");
  a->send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 32}});
  BOOST_TEST(a->read()["ok"] == true);
  auto b = std::make_unique<WsClient>(small, "/api/v2/generate");
  b->send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 32}});
  BOOST_TEST(b->read()["ok"] == true);
  // A third WebSocket session and an OpenAI request are refused.
  WsClient c(small, "/api/v2/generate");
  c.send({{"type", "open_inference_session"}, {"model", "tiny"}, {"max_length", 32}});
  auto r = c.read();
  BOOST_TEST(r["ok"] == false);
  BOOST_TEST(r["traceback"].get<std::string>().find("too many concurrent sessions") != std::string::npos);
  auto h = post_json(small, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 2}});
  BOOST_TEST(h.status == 429);
  BOOST_TEST(h.json()["error"]["message"].get<std::string>().find("too many concurrent sessions") != std::string::npos);
  // Closing one frees its slot.
  a.reset();
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = post_json(small, "/v1/completions", {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 2}}).status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BOOST_TEST(status == 200);
  auto m = get(small, "/metrics");
  BOOST_TEST(m.body.find("corolla_api_sessions_refused_total 2") != std::string::npos, m.body);
}

BOOST_AUTO_TEST_CASE(health_state_and_metrics_describe_the_swarm) {
  auto page = get(port(), "/health");
  BOOST_TEST(page.status == 200);
  BOOST_TEST(page.content_type.find("text/html") == 0u);
  BOOST_TEST(page.body.find("swarm health") != std::string::npos);
  auto state = get(port(), "/api/v1/state").json();
  BOOST_REQUIRE(state["models"].size() == 1u);
  const auto& m = state["models"][0];
  BOOST_TEST(m["name"] == "tiny");
  BOOST_TEST(m["healthy"] == true, state.dump());
  BOOST_TEST(m["coverage"] == json({1, 1, 1, 1}));
  BOOST_REQUIRE(m["servers"].size() == 2u);
  for (const auto& s : m["servers"]) {
    BOOST_TEST(s["state"] == "online");
    BOOST_TEST(s["cache_tokens_left"].get<int64_t>() > 0);
    BOOST_TEST(s["version"] == "0.1.0");
    BOOST_TEST(s["public_name"].get<std::string>().rfind("local-", 0) == 0u);
    BOOST_TEST(s["dtype"] == "f32");                // what the blocks are stored in, not "auto"
    BOOST_TEST(s["kv_dtype"] == "f32");             // the KV caches' (f32 by default)
    BOOST_TEST(s["throughput"].get<double>() > 0);  // measured when the swarm starts
  }
  BOOST_TEST(state["api"]["max_sessions"] == 40);
  auto metrics = get(port(), "/metrics");
  BOOST_TEST(metrics.status == 200);
  BOOST_TEST(metrics.content_type.find("text/plain") == 0u);
  for (const char* line :
       {"corolla_swarm_blocks_served{model=\"tiny\"} 4", "corolla_swarm_servers{model=\"tiny\",state=\"online\"} 2",
        "# TYPE corolla_api_requests_total counter",
        "corolla_api_requests_total{route=\"/api/v1/state\",code=\"200\"}"})
    BOOST_TEST(metrics.body.find(line) != std::string::npos, line);
}

BOOST_AUTO_TEST_CASE(pages_are_served) {
  auto index = get(port(), "/");
  BOOST_TEST(index.status == 200);
  BOOST_TEST(index.body.find("Corolla chat") != std::string::npos);
  BOOST_TEST(get(port(), "/chat.js").content_type.find("text/javascript") == 0u);
  BOOST_TEST(get(port(), "/style.css").status == 200);
  BOOST_TEST(get(port(), "/missing.html").status == 404);
  BOOST_TEST(get(port(), "/../CMakeLists.txt").status == 404);
}

BOOST_AUTO_TEST_CASE(thirty_two_concurrent_chats_all_complete) {
  constexpr int kChats = 32;
  std::vector<std::future<std::pair<int, Streamed>>> chats;
  for (int i = 0; i < kChats; ++i)
    chats.push_back(std::async(std::launch::async, [i] {
      auto r = post_json(port(), "/v1/chat/completions",
                         {{"model", "tiny"},
                          {"messages", {{{"role", "user"}, {"content", "chat number " + std::to_string(i)}}}},
                          {"max_tokens", 12},
                          {"temperature", 0.8},
                          {"seed", i},
                          {"stream", true},
                          {"stream_options", {{"include_usage", true}}}});
      return std::make_pair(r.status, parse_stream(r, "delta"));
    }));
  int complete = 0;
  for (auto& f : chats) {
    auto [status, s] = f.get();
    BOOST_TEST(status == 200);
    BOOST_TEST(s.error.empty(), s.error);
    BOOST_TEST(s.done);
    if (status == 200 && s.done && !s.usage.is_null() && s.usage["completion_tokens"].get<int>() >= 1) complete++;
  }
  BOOST_TEST(complete == kChats);
  BOOST_TEST(world().server->engine().active_sessions() == 0);
}

// Stopping a server cancels its pending accept, whose handler may run on another of the server's threads before the
// acceptor reads as closed there: a stop is not a failure to accept, and prints no "cannot accept connections".
BOOST_AUTO_TEST_CASE(a_stopped_server_reports_no_failure_to_accept) {
  std::stringstream err;
  std::streambuf* was = std::cerr.rdbuf(err.rdbuf());
  for (int i = 0; i < 50; ++i) {
    api::HttpServer server;
    server.listen("127.0.0.1", 0, 4);
    server.stop();
  }
  std::cerr.rdbuf(was);
  BOOST_TEST(err.str().find("cannot accept") == std::string::npos, err.str());
}
