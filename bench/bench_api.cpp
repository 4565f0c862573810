// Concurrent chat sessions through the whole stack: HTTP clients streaming /v1/chat/completions from the API,
// which drives a swarm in this process (a DHT node and servers splitting the model, found through the DHT).
// Prints, for 1 session and for N at once: completed sessions, time to the first token, per-session decode rate
// and the aggregate rate of generated tokens. Results: docs/PERFORMANCE.md, "API: concurrent chat sessions".
//
// Two such stacks run side by side, their rounds alternated: servers that run each session's step alone
// (max_batch_tokens 0) and servers that batch concurrent sessions' steps; with --kv_cache_dtype f16, batching
// servers whose KV caches are f32 and batching servers whose caches are f16.
//
//   bench_api [--model demo] [--sessions 32] [--tokens 64] [--servers 3] [--max_batch_tokens 256]
//             [--only_batched 1]   (the batched stack's rounds alone, for profiles)
//             [--kv_cache_dtype f16]
#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "actors/config/config_file.hpp"
#include "actors/net/connector.hpp"
#include "actors/system/system_config.hpp"
#include "apps/api/api_server.hpp"
#include "apps/api/local_swarm.hpp"
#include "model/model_path.hpp"

using namespace corolla;
using clk = std::chrono::steady_clock;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

struct Result {
  bool ok = false;
  std::string error;
  int64_t tokens = 0;
  double first_s = 0, total_s = 0;
};

// One streamed chat completion; the time of the first content chunk is taken as it arrives.
Result chat(uint16_t port, const std::string& model, int i, int64_t tokens) {
  Result out;
  try {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
    nlohmann::json body = {
        {"model", model},
        {"messages",
         {{{"role", "user"}, {"content", "Write a story about a robot, number " + std::to_string(i) + "."}}}},
        {"max_tokens", tokens},
        {"temperature", 0.7},
        {"seed", i},
        {"ignore_eos", true},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}}};
    http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
    req.prepare_payload();
    const auto t0 = clk::now();
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    bool first = false;
    std::string all;
    auto on_chunk = [&](uint64_t, beast::string_view data, beast::error_code&) -> size_t {
      if (!first && data.find("\"content\":\"") != beast::string_view::npos &&
          data.find("\"content\":\"\"") == beast::string_view::npos) {
        first = true;
        out.first_s = std::chrono::duration<double>(clk::now() - t0).count();
      }
      all.append(data.data(), data.size());
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    http::read(stream, buffer, parser);
    out.total_s = std::chrono::duration<double>(clk::now() - t0).count();
    if (parser.get().result_int() != 200) {
      out.error = "HTTP " + std::to_string(parser.get().result_int());
      return out;
    }
    const auto at = all.rfind("\"completion_tokens\":");
    if (at == std::string::npos || all.find("[DONE]") == std::string::npos) {
      out.error = "no usage or [DONE]";
      return out;
    }
    out.tokens = std::stoll(all.substr(at + 20));
    out.ok = true;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// One round of `sessions` concurrent chats; prints a row of the table.
void run_round(uint16_t port, const std::string& model, int sessions, int64_t tokens, const std::string& label) {
  std::vector<Result> results(static_cast<size_t>(sessions));
  std::vector<std::thread> threads;
  const auto t0 = clk::now();
  for (int i = 0; i < sessions; ++i)
    threads.emplace_back([&, i] { results[static_cast<size_t>(i)] = chat(port, model, i, tokens); });
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(clk::now() - t0).count();
  int ok = 0;
  int64_t total = 0;
  std::vector<double> ttft, rate;
  for (const auto& r : results) {
    if (!r.ok) {
      std::cerr << "  session failed: " << r.error << "\n";
      continue;
    }
    ok++;
    total += r.tokens;
    ttft.push_back(r.first_s);
    if (r.tokens > 1 && r.total_s > r.first_s) rate.push_back((r.tokens - 1) / (r.total_s - r.first_s));
  }
  std::printf("| %d | %s | %d/%d | %lld | %.2f | %.0f / %.0f | %.1f / %.1f | %.1f |\n", sessions, label.c_str(), ok,
              sessions, static_cast<long long>(total), wall, pct(ttft, 0.5) * 1e3, pct(ttft, 0.95) * 1e3,
              pct(rate, 0.5), pct(rate, 0.05), total / wall);
  std::fflush(stdout);
}

// A swarm of `servers` in this process and the API over it. Each stack its own connector: a local swarm's actors
// go by in-process names, which would collide in one.
struct Stack {
  caf::actor connector;
  api::LocalSwarm swarm;
  api::ApiServer server;
  uint16_t port = 0;
  static api::LocalSwarmOptions swarm_options(const std::string& path, int servers, int64_t max_batch_tokens,
                                              DType kv_dtype) {
    api::LocalSwarmOptions o;
    o.kv_dtype = kv_dtype;
    o.model = path;
    o.servers = servers;
    o.publish = false;
    o.cache_tokens = 32768;
    o.max_sessions = 256;
    o.max_batch_tokens = max_batch_tokens;
    return o;
  }
  static api::ApiConfig api_config(const std::string& path, const std::string& dht, int sessions) {
    api::ApiConfig c;
    c.port = 0;
    c.initial_peers = {dht};
    c.max_sessions = std::max(sessions, 1);
    c.models.push_back({"bench", path, "", ""});
    return c;
  }
  Stack(caf::actor_system& sys, const std::string& path, int servers, int sessions, int64_t max_batch_tokens,
        DType kv_dtype)
      : connector(spawn_connector(sys)),
        swarm(sys, connector, swarm_options(path, servers, max_batch_tokens, kv_dtype)),
        server(sys, api_config(path, swarm.dht_address(), sessions), connector) {
    port = server.start(2);
    chat(port, "bench", 999, 8);  // warm-up
  }
  ~Stack() {
    server.stop();
    swarm.stop();
    caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string model = "demo";
  int sessions = 32, servers = 3;
  int64_t tokens = 64, max_batch_tokens = api::LocalSwarmOptions{}.max_batch_tokens;
  bool only_batched = false;  // for profiles of the batched stack alone
  DType kv_dtype = DType::f32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      model = argv[i + 1];
    else if (a == "--sessions")
      sessions = std::stoi(argv[i + 1]);
    else if (a == "--tokens")
      tokens = std::stoll(argv[i + 1]);
    else if (a == "--servers")
      servers = std::stoi(argv[i + 1]);
    else if (a == "--max_batch_tokens")
      max_batch_tokens = std::stoll(argv[i + 1]);
    else if (a == "--only_batched")
      only_batched = std::string(argv[i + 1]) == "1";
    else if (a == "--kv_cache_dtype" && !check_kv_cache_dtype(argv[i + 1]))
      kv_dtype = parse_dtype(argv[i + 1]).value();
    else {
      std::cerr << "usage: bench_api [--model demo] [--sessions 32] [--tokens 64] [--servers 3] "
                   "[--max_batch_tokens 256] [--only_batched 1] [--kv_cache_dtype f32|f16]\n";
      return 2;
    }
  }
  try {
    const std::string path = resolve_model_path(model);
    corolla_config cfg;
    caf::actor_system sys{cfg};
    {
      // Two stacks side by side, their rounds alternated: servers that run each step alone, and servers that
      // batch concurrent sessions' steps; with --kv_cache_dtype f16, batching servers with f32 caches and with f16.
      const bool compare_kv = kv_dtype != DType::f32;
      Stack alone(sys, path, servers, sessions, compare_kv ? max_batch_tokens : 0, DType::f32);
      Stack batched(sys, path, servers, sessions, max_batch_tokens, kv_dtype);
      std::printf("model %s, %d servers in this process, %lld new tokens per session (ignore_eos), %u cores\n\n",
                  path.c_str(), servers, static_cast<long long>(tokens), std::thread::hardware_concurrency());
      std::printf(
          "| sessions | servers | completed | tokens | wall s | first token ms (p50 / p95) | "
          "tokens/s per session (p50 / p5) | tokens/s, all sessions |\n|---|---|---|---|---|---|---|---|\n");
      const std::string on = "batch " + std::to_string(max_batch_tokens) + " tokens" + (compare_kv ? ", f16 KV" : "");
      const std::string off =
          compare_kv ? "batch " + std::to_string(max_batch_tokens) + " tokens, f32 KV" : "each step alone";
      for (int n : {1, 8, 32, 64})
        if (n <= sessions) {
          if (!only_batched) run_round(alone.port, "bench", n, tokens, off);
          run_round(batched.port, "bench", n, tokens, on);
        }
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
