// The API families, each adding its routes to the HTTP server (one file each).
#pragma once

#include "apps/api/engine.hpp"
#include "apps/api/http_server.hpp"

namespace corolla::api {

// OpenAI-compatible: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (openai_api.cpp).
void add_openai_routes(HttpServer& server, Engine& engine);
// chat.petals.dev-compatible: WebSocket /api/v2/generate, POST /api/v1/generate (petals_api.cpp).
void add_petals_routes(HttpServer& server, Engine& engine);
// The swarm: GET /health (page), /api/v1/state (JSON), /metrics (Prometheus text) (health_api.cpp).
void add_health_routes(HttpServer& server, Engine& engine);
// The pages in web/ (GET / is the chat page) (health_api.cpp).
void add_page_routes(HttpServer& server, Engine& engine);

}  // namespace corolla::api
