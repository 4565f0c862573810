#include "apps/api/api_server.hpp"

#include <algorithm>

#include "apps/api/api_routes.hpp"

namespace corolla::api {

ApiServer::ApiServer(caf::actor_system& sys, ApiConfig config, caf::actor connector)
    : engine_(std::make_shared<Engine>(sys, std::move(config), std::move(connector))),
      http_(std::make_unique<HttpServer>()) {
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
