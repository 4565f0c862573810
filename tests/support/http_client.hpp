// A blocking HTTP/1.1 and WebSocket client for tests of the API (Boost.Beast): one request per connection.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace corolla::test {

struct HttpReply {
  int status = 0;
  std::string body;
  std::string content_type;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
  // The "data: ..." payloads of a server-sent event stream.
  std::vector<std::string> events() const {
    std::vector<std::string> out;
    size_t start = 0;
    while (start < body.size()) {
      size_t end = body.find("\n\n", start);
      if (end == std::string::npos) end = body.size();
      const std::string ev = body.substr(start, end - start);
      if (ev.rfind("data: ", 0) == 0) out.push_back(ev.substr(6));
      start = end + 2;
    }
    return out;
  }
};

inline HttpReply http_request(uint16_t port, boost::beast::http::verb method, const std::string& target,
                              const std::string& body = "", const std::string& content_type = "application/json") {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty() || method == http::verb::post) {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  stream.expires_after(std::chrono::seconds(120));
  beast::error_code write_error;  // a server that refuses a body may answer and close before it is all sent
  http::write(stream, req, write_error);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(stream, buffer, parser);
  HttpReply out;
  out.status = parser.get().result_int();
  out.body = parser.get().body();
  out.content_type = std::string(parser.get()[http::field::content_type]);
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return out;
}

inline HttpReply get(uint16_t port, const std::string& target) {
  return http_request(port, boost::beast::http::verb::get, target);
}
inline HttpReply post_json(uint16_t port, const std::string& target, const nlohmann::json& body) {
  return http_request(port, boost::beast::http::verb::post, target, body.dump());
}

// A WebSocket client: send JSON, read JSON messages until the server closes.
class WsClient {
 public:
  WsClient(uint16_t port, const std::string& target) : ws_(ioc_) {
    boost::asio::ip::tcp::resolver resolver(ioc_);
    boost::asio::connect(ws_.next_layer(), resolver.resolve("127.0.0.1", std::to_string(port)));
    ws_.handshake("127.0.0.1", target);
  }
  ~WsClient() {
    boost::beast::error_code ec;
    ws_.close(boost::beast::websocket::close_code::normal, ec);
  }
  void send(const nlohmann::json& msg) { send_text(msg.dump()); }
  void send_text(const std::string& text) {
    ws_.text(true);
    ws_.write(boost::asio::buffer(text));
  }
  // The next message, or null when the server closed the connection.
  nlohmann::json read() {
    boost::beast::flat_buffer buffer;
    boost::beast::error_code ec;
    ws_.read(buffer, ec);
    if (ec) return nullptr;
    return nlohmann::json::parse(boost::beast::buffers_to_string(buffer.data()));
  }
  void close() {
    boost::beast::error_code ec;
    ws_.close(boost::beast::websocket::close_code::normal, ec);
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::websocket::stream<boost::asio::ip::tcp::socket> ws_;
};

}  // namespace corolla::test
