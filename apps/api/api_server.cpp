#include "apps/api/api_server.hpp"

#include <algorithm>

#include "apps/api/api_routes.hpp"

namespace corolla::api {

HttpLimits http_limits(const ApiConfig& c) {
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  HttpLimits l;
  l.max_connections = static_cast<size_t>(c.max_connections);
  l.max_connections_per_address = static_cast<size_t>(c.max_connections_per_address);
  l.header_timeout = ms(c.header_timeout_s);
  l.body_timeout = ms(c.body_timeout_s);
  l.max_body_bytes = static_cast<size_t>(c.max_body_bytes);
  return l;
}

ApiServer::ApiServer(caf::actor_system& sys, ApiConfig config, caf::actor connector)
    : engine_(std::make_shared<Engine>(sys, std::move(config), std::move(connector))),
      http_(std::make_unique<HttpServer>(http_limits(engine_->config()))) {
  add_openai_routes(*http_, *engine_);
  add_petals_routes(*http_, *engine_);
  add_health_routes(*http_, *engine_);
  add_page_routes(*http_, *engine_);
  http_->on_response([e = engine_.get()](const std::string& route, int status) { e->count_request(route, status); });
}

ApiServer::~ApiServer() { stop(); }

uint16_t ApiServer::start(int threads) {
  return http_->listen(engine_->config().host, engine_->config().port, std::max(1, threads));
}

void ApiServer::stop() {
  if (http_) http_->stop();
}

}  // namespace corolla::api
