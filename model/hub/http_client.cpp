#include "model/hub/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <chrono>
#include <limits>

namespace corolla::hub {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool default_port(const Url& u) {
  return (u.scheme == "http" && u.port == "80") || (u.scheme == "https" && u.port == "443");
}

std::chrono::milliseconds timeout_of(const HttpRequest& r) {
  return std::chrono::milliseconds(static_cast<int64_t>(r.timeout_s * 1000));
}

// One request and its answer on a connected stream (TCP or TLS over TCP).
template <class Stream>
HttpAnswer exchange(Stream& stream, const HttpRequest& r) {
  auto& tcp_layer = beast::get_lowest_layer(stream);
  const bool head = r.method == "HEAD";
  http::request<http::empty_body> req{head ? http::verb::head : http::verb::get, r.url.target, 11};
  req.set(http::field::host, default_port(r.url) ? r.url.host_text() : r.url.host_text() + ":" + r.url.port);
  req.set(http::field::user_agent, "corolla");
  req.set(http::field::accept_encoding, "identity");
  for (const auto& [name, value] : r.headers) req.set(name, value);
  tcp_layer.expires_after(timeout_of(r));
  http::write(stream, req);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());  // a sink bounds what it takes; other bodies are cut at
                                                                 // kSmallBodyBytes below
  if (head) parser.skip(true);
  tcp_layer.expires_after(timeout_of(r));
  http::read_header(stream, buffer, parser);
  HttpAnswer answer;
  answer.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get())
    answer.headers[lower(std::string(field.name_string()))] = std::string(field.value());
  const bool to_sink = r.sink && answer.status >= 200 && answer.status < 300;
  std::vector<char> chunk(1 << 16);
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    tcp_layer.expires_after(timeout_of(r));
    beast::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = chunk.size() - parser.get().body().size;
    if (ec) {  // what arrived before the connection broke still counts (a download resumes after it)
      if (to_sink && n > 0) r.sink(chunk.data(), n);
      throw beast::system_error(ec);
    }
    if (to_sink) {
      r.sink(chunk.data(), n);
    } else {
      answer.body.append(chunk.data(), std::min(n, kSmallBodyBytes - answer.body.size()));
      if (answer.body.size() == kSmallBodyBytes) break;
    }
  }
  return answer;
}

}  // namespace

std::string Url::str() const {
  return scheme + "://" + (default_port(*this) ? host_text() : host_text() + ":" + port) + target;
}

std::optional<Url> parse_url(std::string_view text) {
  Url u;
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos) return std::nullopt;
  u.scheme = lower(text.substr(0, sep));
  if (u.scheme != "http" && u.scheme != "https") return std::nullopt;
  std::string_view rest = text.substr(sep + 3);
  const size_t path = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path);
  u.target = path == std::string_view::npos ? "/" : std::string(rest.substr(path));
  if (!u.target.empty() && u.target[0] != '/') u.target = "/" + u.target;
  if (const size_t hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
  if (authority.find('@') != std::string_view::npos) return std::nullopt;  // no credentials in URLs
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    u.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return std::nullopt;
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (u.host.empty() || u.host.size() > 253) return std::nullopt;
  for (char c : u.host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '_'))
      return std::nullopt;
  if (port.empty()) {
    u.port = u.scheme == "https" ? "443" : "80";
  } else {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    const int p = std::stoi(std::string(port));
    if (p < 1 || p > 65535) return std::nullopt;
    u.port = std::to_string(p);
  }
  return u;
}

std::optional<Url> follow_location(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return parse_url(location);
  if (location.empty() || location.front() != '/' || (location.size() > 1 && location[1] == '/')) return std::nullopt;
  Url u = base;
  u.target = std::string(location);
  return u;
}

HttpAnswer http_send(const HttpRequest& r) {
  const std::string where = r.url.host_text() + ":" + r.url.port;
  asio::io_context ioc;
  tcp::resolver::results_type endpoints;
  try {
    endpoints = tcp::resolver(ioc).resolve(r.url.host, r.url.port);
  } catch (const boost::system::system_error& e) {
    throw HttpUnreachable("could not resolve " + r.url.host + ": " + e.code().message());
  }
  auto connect = [&](beast::tcp_stream& s) {
    s.expires_after(timeout_of(r));
    try {
      s.connect(endpoints);
    } catch (const boost::system::system_error& e) {
      throw HttpUnreachable("could not connect to " + where + ": " + e.code().message());
    }
  };
  try {
    if (r.url.scheme == "http") {
      beast::tcp_stream stream(ioc);
      connect(stream);
      return exchange(stream, r);
    }
    asio::ssl::context tls(asio::ssl::context::tls_client);
    tls.set_default_verify_paths();
    tls.set_verify_mode(asio::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, tls);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), r.url.host.c_str()))
      throw HttpUnreachable("TLS to " + where + ": cannot set the server name");
    stream.set_verify_callback(asio::ssl::host_name_verification(r.url.host));
    connect(beast::get_lowest_layer(stream));
    stream.handshake(asio::ssl::stream_base::client);
    return exchange(stream, r);
  } catch (const HttpUnreachable&) {
    throw;
  } catch (const boost::system::system_error& e) {
    throw HttpUnreachable("connection to " + where + " failed: " + e.code().message());
  }
}

}  // namespace corolla::hub
