// `corolla api`'s server: the engine (models, swarm clients, limits) behind an HTTP server with every route.
//
//   ApiServer api(sys, config, connector);
//   uint16_t port = api.start();    // listening; stop() or the destructor ends it
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <memory>

#include "apps/api/api_config.hpp"
#include "apps/api/engine.hpp"
#include "apps/api/http_server.hpp"

namespace corolla::api {

// The HTTP server's limits from the configuration.
HttpLimits http_limits(const ApiConfig& config);

class ApiServer {
 public:
  // Loads the models (throws std::runtime_error naming one that fails).
  ApiServer(caf::actor_system& sys, ApiConfig config, caf::actor connector);
  ~ApiServer();
  // Listens on config.host:config.port with `threads` I/O threads; returns the port.
  uint16_t start(int threads = 1);
  void stop();
  Engine& engine() { return *engine_; }

 private:
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace corolla::api
