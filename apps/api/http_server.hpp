// A small HTTP/1.1 and WebSocket server on Boost.Beast: a listener, one connection object per client (requests
// read one at a time, keep-alive), exact-path routes, and a fallback for everything else (static files).
// Handlers may answer later and from any thread (the answer is posted to the connection's strand): the API
// answers from actor threads. A response is either whole (Responder::send) or a stream of server-sent events
// (Responder::start_sse); a WebSocket route gets a WebSocketSession after the upgrade.
#pragma once

#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace corolla::api {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

class HttpConnection;
class WsConnection;

// Server-sent events on one response (chunked transfer encoding). Thread-safe.
class SseStream {
 public:
  SseStream(std::shared_ptr<HttpConnection> c, uint64_t exchange) : conn_(std::move(c)), exchange_(exchange) {}
  // Sends "data: <data>\n\n".
  void event(const std::string& data);
  // Ends the response; the connection goes on to the next request (or closes).
  void end();
  // Whether the client has gone (a write failed); on_gone runs once when that is noticed.
  bool gone() const;
  void on_gone(std::function<void()> f);

 private:
  std::shared_ptr<HttpConnection> conn_;
  uint64_t exchange_;
};

// The answer to one request: send it once, or start server-sent events. Copyable; thread-safe.
class Responder {
 public:
  Responder(std::shared_ptr<HttpConnection> c, uint64_t exchange) : conn_(std::move(c)), exchange_(exchange) {}
  void send(Response res) const;
  void json(int status, const nlohmann::json& body) const;
  void text(int status, std::string body, const std::string& content_type) const;
  std::shared_ptr<SseStream> start_sse(int status = 200) const;

 private:
  std::shared_ptr<HttpConnection> conn_;
  uint64_t exchange_;
};

// A WebSocket after the upgrade. Messages arrive one at a time on on_message; send() queues text frames.
class WebSocketSession {
 public:
  explicit WebSocketSession(std::shared_ptr<WsConnection> c) : conn_(std::move(c)) {}
  // Set both before start(): on_message gets each text message, on_close runs once when the socket closes.
  void on_message(std::function<void(std::string)> f);
  void on_close(std::function<void()> f);
  void start();
  void send(std::string text);
  // Closes after the queued messages are sent.
  void close();

 private:
  std::shared_ptr<WsConnection> conn_;
};

// What one client may cost the server. Connections over a cap are closed as soon as they are accepted.
struct HttpLimits {
  size_t max_connections = 512;                      // open at once, HTTP and WebSocket
  size_t max_connections_per_address = 64;           // open at once from one remote address
  std::chrono::milliseconds header_timeout{10'000};  // from the end of the last answer (or the connection) to
                                                     // a request's whole header: idle and slow clients go
  std::chrono::milliseconds body_timeout{30'000};    // to read a request's body after its header
  size_t max_body_bytes = 1 << 20;                   // a request body, and a WebSocket message
};

using Handler = std::function<void(const Request&, const Responder&)>;
using WsHandler = std::function<void(const Request&, std::shared_ptr<WebSocketSession>)>;

class HttpServer {
 public:
  explicit HttpServer(HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes match the path exactly (the query string is not part of it). Add them before listen().
  void route(http::verb method, const std::string& path, Handler h);
  void websocket(const std::string& path, WsHandler h);
  void fallback(Handler h);
  // Called for every answered request: (route or path, status), for metrics.
  void on_response(std::function<void(const std::string&, int)> f);

  // Binds and starts `threads` threads (at least 1 to serve). Returns the port (useful with port 0). Throws
  // std::runtime_error with the address when it cannot listen.
  uint16_t listen(const std::string& host, uint16_t port, int threads = 1);
  void stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Throws what HttpServer::listen would when host:port cannot be bound (checked by binding it for a moment), so a
// command can fail before it starts anything slow.
void check_can_listen(const std::string& host, uint16_t port);

// Helpers for handlers.
// The path of a target without its query string.
std::string target_path(const std::string& target);
// Decodes application/x-www-form-urlencoded text (also query strings) into name -> value (later ones win).
std::vector<std::pair<std::string, std::string>> parse_form(const std::string& text);

}  // namespace corolla::api
