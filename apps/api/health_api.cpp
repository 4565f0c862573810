// The swarm's health (as health.petals.dev shows it) and the static pages:
//   GET /health         the page (web/health.html), which polls /api/v1/state
//   GET /api/v1/state   per model: every server announced in the DHT (span, state, throughput, cache left, version,
//                       public name, pings), per-block coverage by online servers and the blocks nobody serves
//   GET /metrics        the API's counters and the swarm's coverage in Prometheus' text format
//   GET /, /<file>      the pages of web/ (built in, or from web_dir)
#include <sstream>

#include "apps/api/api_common.hpp"
#include "apps/api/api_routes.hpp"
#include "apps/api/static_files.hpp"

namespace corolla::api {
namespace {

using nlohmann::json;

std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string metrics_text(Engine& engine, const json& state) {
  std::ostringstream o;
  auto head = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto& c = engine.counters();
  head("corolla_api_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : engine.request_counts())
    o << "corolla_api_requests_total{route=\"" << label(key.first) << "\",code=\"" << key.second << "\"} " << n << "\n";
  head("corolla_api_sessions", "gauge", "Inference sessions open now.");
  o << "corolla_api_sessions " << engine.active_sessions() << "\n";
  head("corolla_api_max_sessions", "gauge", "Inference sessions the API allows at once.");
  o << "corolla_api_max_sessions " << engine.config().max_sessions << "\n";
  head("corolla_api_sessions_opened_total", "counter", "Inference sessions opened over the swarm.");
  o << "corolla_api_sessions_opened_total " << c.sessions_opened << "\n";
  head("corolla_api_sessions_refused_total", "counter", "Requests refused because max_sessions were open.");
  o << "corolla_api_sessions_refused_total " << c.sessions_refused << "\n";
  head("corolla_api_generations_total", "counter", "Generations finished.");
  o << "corolla_api_generations_total " << c.generations << "\n";
  head("corolla_api_generation_errors_total", "counter", "Generations that ended in an error.");
  o << "corolla_api_generation_errors_total " << c.generation_errors << "\n";
  head("corolla_api_prompt_tokens_total", "counter", "Prompt tokens fed to the swarm.");
  o << "corolla_api_prompt_tokens_total " << c.prompt_tokens << "\n";
  head("corolla_api_generated_tokens_total", "counter", "Tokens generated.");
  o << "corolla_api_generated_tokens_total " << c.generated_tokens << "\n";
  head("corolla_api_uptime_seconds", "gauge", "Seconds since the API started.");
  o << "corolla_api_uptime_seconds " << engine.uptime_s() << "\n";
  head("corolla_swarm_servers", "gauge", "Servers announced in the DHT, by model and state.");
  for (const auto& m : state["models"]) {
    std::map<std::string, int> by_state{{"online", 0}, {"joining", 0}, {"offline", 0}};
    for (const auto& s : m["servers"]) by_state[s["state"].get<std::string>()]++;
    for (const auto& [st, n] : by_state)
      o << "corolla_swarm_servers{model=\"" << label(m["name"]) << "\",state=\"" << label(st) << "\"} " << n << "\n";
  }
  head("corolla_swarm_blocks", "gauge", "Blocks of each model.");
  for (const auto& m : state["models"])
    o << "corolla_swarm_blocks{model=\"" << label(m["name"]) << "\"} " << m["num_blocks"] << "\n";
  head("corolla_swarm_blocks_served", "gauge", "Blocks with at least one online server.");
  for (const auto& m : state["models"]) {
    int served = 0;
    for (const auto& n : m["coverage"]) served += n.get<int>() > 0;
    o << "corolla_swarm_blocks_served{model=\"" << label(m["name"]) << "\"} " << served << "\n";
  }
  head("corolla_swarm_throughput", "gauge", "Announced throughput of each online server (requests per second).");
  for (const auto& m : state["models"])
    for (const auto& s : m["servers"])
      if (s["state"] == "online")
        o << "corolla_swarm_throughput{model=\"" << label(m["name"]) << "\",server=\"" << label(s["address"]) << "\"} "
          << s["throughput"] << "\n";
  return o.str();
}

void serve_file(Engine& engine, const std::string& path, const Responder& res) {
  std::string body;
  if (!find_web_file(engine.config().web_dir, path, body))
    return res.text(404, "no such page: " + path + "\n", "text/plain; charset=utf-8");
  res.text(200, std::move(body), content_type_for(path == "/" ? "/index.html" : path));
}

}  // namespace

void add_health_routes(HttpServer& server, Engine& engine) {
  server.route(http::verb::get, "/health",
               [&engine](const Request&, const Responder& res) { serve_file(engine, "/health.html", res); });
  server.route(http::verb::get, "/api/v1/state", [&engine](const Request&, const Responder& res) {
    engine.read_state([res](const json& state) { res.json(200, state); });
  });
  server.route(http::verb::get, "/metrics", [&engine](const Request&, const Responder& res) {
    engine.read_state([&engine, res](const json& state) {
      res.text(200, metrics_text(engine, state), "text/plain; version=0.0.4; charset=utf-8");
    });
  });
}

void add_page_routes(HttpServer& server, Engine& engine) {
  server.fallback([&engine](const Request& req, const Responder& res) {
    const std::string path = target_path(std::string(req.target()));
    if (path.rfind("/v1/", 0) == 0 || path.rfind("/api/", 0) == 0)
      return send_openai_error(res, ApiError{404, "not_found_error", "no such endpoint: " + path, ""});
    if (req.method() != http::verb::get && req.method() != http::verb::head)
      return send_openai_error(res, ApiError{405, "invalid_request_error", "only GET serves pages", ""});
    serve_file(engine, path, res);
  });
}

}  // namespace corolla::api
