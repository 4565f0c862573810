#include "apps/api/http_server.hpp"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sys/resource.h>

#include "actors/net/address_block.hpp"
#include "apps/api/connection_limits.hpp"
#include "apps/api/json_text.hpp"

namespace corolla::api {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;

namespace {
constexpr const char* kServerName = "corolla";
// How long accept waits after it failed (out of descriptors, mostly): the pending connection stays in the
// backlog and the socket stays readable, so retrying at once would spin a core without ever succeeding.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// Descriptors kept for everything but HTTP connections (the DHT node, servers and files of `corolla run`).
constexpr size_t kReservedDescriptors = 128;

void add_common_headers(http::fields& f) {
  f.set(http::field::server, kServerName);
  f.set(http::field::access_control_allow_origin, "*");
}
}  // namespace

struct HttpServer::Impl {
  explicit Impl(HttpLimits l) : limits(l), accept_backoff(ioc) {}
  HttpLimits limits;
  std::shared_ptr<ConnectionLimits> connections;  // made in listen(), when the open-file limit is known
  net::io_context ioc;
  net::steady_timer accept_backoff;
  bool accept_failing = false;  // said once per run of failures, not per retry
  std::optional<tcp::acceptor> acceptor;
  std::map<std::pair<http::verb, std::string>, Handler> routes;
  std::set<std::string> paths;
  std::map<std::string, WsHandler> ws_routes;
  Handler fallback;
  std::function<void(const std::string&, int)> on_response;
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::vector<std::weak_ptr<HttpConnection>> http_open;  // shut down on stop
  std::vector<std::weak_ptr<WsConnection>> ws_open;
  void do_accept(std::shared_ptr<Impl> self);
  template <class T>
  static void track(std::vector<std::weak_ptr<T>>& list, std::mutex& m, const std::shared_ptr<T>& c) {
    std::lock_guard lock(m);
    std::erase_if(list, [](const std::weak_ptr<T>& w) { return w.expired(); });
    list.push_back(c);
  }
};

// ---------------------------------------------------------------------------------------------- WebSocket

class WsConnection : public std::enable_shared_from_this<WsConnection> {
 public:
  WsConnection(tcp::socket&& socket, std::shared_ptr<HttpServer::Impl> impl, ConnectionLimits::Ticket ticket)
      : impl_(std::move(impl)), ticket_(std::move(ticket)), ws_(std::move(socket)) {}

  void accept(Request req, WsHandler handler) {
    // A peer that neither sends nor answers pings for idle_timeout is dropped (browsers answer pings on their
    // own, so a chat page left open stays).
    auto timeouts = websocket::stream_base::timeout::suggested(beast::role_type::server);
    timeouts.idle_timeout = std::chrono::seconds(300);
    timeouts.keep_alive_pings = true;
    ws_.set_option(timeouts);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(http::field::server, kServerName); }));
    ws_.read_message_max(impl_->limits.max_body_bytes);
    auto self = shared_from_this();
    auto shared_req = std::make_shared<Request>(std::move(req));
    ws_.async_accept(*shared_req, [self, shared_req, handler](beast::error_code ec) {
      if (ec) return;
      handler(*shared_req, std::make_shared<WebSocketSession>(self));
    });
  }

  void set_on_message(std::function<void(std::string)> f) { on_message_ = std::move(f); }
  void set_on_close(std::function<void()> f) { on_close_ = std::move(f); }

  void start() {
    net::dispatch(ws_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  void send(std::string text) {
    net::post(ws_.get_executor(), [self = shared_from_this(), text = std::move(text)]() mutable {
      if (self->closed_ || self->closing_) return;
      self->queue_.push_back(std::move(text));
      if (!self->writing_) self->do_write();
    });
  }

  void close() {
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      if (self->closed_ || self->closing_) return;
      self->closing_ = true;
      if (!self->writing_) self->do_close();
    });
  }

  void shutdown() {
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      beast::get_lowest_layer(self->ws_).socket().close(ec);
    });
  }

 private:
  void do_read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->finished();
      std::string msg = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(n);
      if (self->on_message_ && !self->closing_ && !self->deliver(std::move(msg))) return self->abort();
      self->do_read();
    });
  }

  // A handler that throws must not unwind through the I/O thread (that ends the process): the connection that
  // caused it is dropped instead. Handlers answer bad input themselves; this is the net beneath them.
  bool deliver(std::string msg) {
    try {
      on_message_(std::move(msg));
      return true;
    } catch (const std::exception& e) {
      std::cerr << "api: a WebSocket handler failed (" << e.what() << "); closing the connection\n";
    } catch (...) {
      std::cerr << "api: a WebSocket handler failed; closing the connection\n";
    }
    return false;
  }

  void abort() {
    beast::error_code ec;
    beast::get_lowest_layer(ws_).socket().close(ec);
    finished();
  }

  void do_write() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (!self->queue_.empty()) self->queue_.pop_front();
      if (ec || self->closed_) return self->finished();
      if (!self->queue_.empty()) return self->do_write();
      if (self->closing_) self->do_close();
    });
  }

  void do_close() {
    ws_.async_close(websocket::close_code::normal,
                    [self = shared_from_this()](beast::error_code) { self->finished(); });
  }

  void finished() {
    if (closed_) return;
    closed_ = true;
    // The message being written stays until its write completes: Beast still reads it (the connection ending
    // while a reply was on its way freed it under the write, and the write's completion popped an empty queue).
    if (writing_)
      queue_.erase(std::next(queue_.begin()), queue_.end());
    else
      queue_.clear();
    auto f = std::move(on_close_);
    on_close_ = nullptr;
    on_message_ = nullptr;
    if (f) f();
  }

  std::shared_ptr<HttpServer::Impl> impl_;  // first: the io_context outlives the socket
  ConnectionLimits::Ticket ticket_;
  websocket::stream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  std::deque<std::string> queue_;
  bool writing_ = false, closing_ = false, closed_ = false;
  std::function<void(std::string)> on_message_;
  std::function<void()> on_close_;
};

void WebSocketSession::on_message(std::function<void(std::string)> f) { conn_->set_on_message(std::move(f)); }
void WebSocketSession::on_close(std::function<void()> f) { conn_->set_on_close(std::move(f)); }
void WebSocketSession::start() { conn_->start(); }
void WebSocketSession::send(std::string text) { conn_->send(std::move(text)); }
void WebSocketSession::close() { conn_->close(); }

// ---------------------------------------------------------------------------------------------- HTTP

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket&& socket, std::shared_ptr<HttpServer::Impl> impl, ConnectionLimits::Ticket ticket)
      : impl_(std::move(impl)), ticket_(std::move(ticket)), stream_(std::move(socket)) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  // Any thread. `exchange` names the request being answered: answers to an earlier one are dropped.
  void respond(uint64_t exchange, Response res) {
    net::post(stream_.get_executor(), [self = shared_from_this(), exchange, res = std::move(res)]() mutable {
      if (exchange == self->exchange_) self->write_response(std::move(res));
    });
  }
  void sse_start(uint64_t exchange, int status) {
    net::post(stream_.get_executor(), [self = shared_from_this(), exchange, status] {
      if (exchange == self->exchange_) self->write_sse_header(status);
    });
  }
  void sse_chunk(uint64_t exchange, std::string data, bool last) {
    net::post(stream_.get_executor(), [self = shared_from_this(), exchange, data = std::move(data), last]() mutable {
      if (exchange != self->exchange_ || self->sse_ended_) return;
      if (last) self->sse_ended_ = true;
      self->chunks_.push_back({std::make_shared<std::string>(std::move(data)), last});
      self->pump();
    });
  }
  bool gone() const { return gone_; }
  void set_on_gone(std::function<void()> f) {
    net::post(stream_.get_executor(), [self = shared_from_this(), f = std::move(f)]() mutable {
      if (self->gone_) return f();
      self->on_gone_ = std::move(f);
    });
  }
  void shutdown() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.socket().close(ec);
    });
  }

 private:
  struct chunk {
    std::shared_ptr<std::string> data;
    bool last = false;
  };

  uint64_t exchange() const { return exchange_; }

  void do_read() {
    ++exchange_;
    parser_.emplace();
    parser_->body_limit(impl_->limits.max_body_bytes);
    answered_ = false;
    sse_ = false;
    sse_ended_ = false;
    header_written_ = false;
    chunks_.clear();
    stream_.expires_after(impl_->limits.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || self->parser_->is_done()) return self->on_read(ec);
      self->stream_.expires_after(self->impl_->limits.body_timeout);
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec, size_t) { self->on_read(ec); });
    });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::end_of_stream) return close();
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      route_ = "(too large)";
      Response res{http::status::payload_too_large, 11};
      res.set(http::field::content_type, "application/json");
      const size_t limit = impl_->limits.max_body_bytes;
      const std::string shown =
          limit % (1 << 20) == 0 ? std::to_string(limit >> 20) + " MiB" : std::to_string(limit) + " bytes";
      res.body() =
          json_text({{"error", {{"message", "the request body is over " + shown}, {"type", "invalid_request_error"}}}});
      return write_response(std::move(res));
    }
    if (ec) return close();
    Request req = parser_->release();
    keep_alive_ = req.keep_alive();
    const std::string path = target_path(std::string(req.target()));
    if (websocket::is_upgrade(req)) {
      auto it = impl_->ws_routes.find(path);
      if (it != impl_->ws_routes.end()) {
        stream_.expires_never();
        auto ws = std::make_shared<WsConnection>(stream_.release_socket(), impl_, std::move(ticket_));
        HttpServer::Impl::track(impl_->ws_open, impl_->mutex, ws);
        if (impl_->on_response) impl_->on_response(path, 101);
        ws->accept(std::move(req), it->second);
        return;
      }
    }
    route_ = path;
    Responder responder(shared_from_this(), exchange_);
    try {
      if (req.method() == http::verb::options) {
        Response res{http::status::no_content, req.version()};
        res.set(http::field::access_control_allow_methods, "GET, POST, OPTIONS");
        res.set(http::field::access_control_allow_headers, "Content-Type, Authorization");
        return write_response(std::move(res));
      }
      if (auto it = impl_->routes.find({req.method(), path}); it != impl_->routes.end())
        return it->second(req, responder);
      if (impl_->paths.count(path)) {
        return responder.json(
            405, {{"error",
                   {{"message", "method " + std::string(req.method_string()) + " is not allowed on " + path},
                    {"type", "invalid_request_error"}}}});
      }
      route_ = "(other)";
      if (impl_->fallback) return impl_->fallback(req, responder);
      responder.json(404, {{"error", {{"message", "no such page: " + path}, {"type", "not_found_error"}}}});
    } catch (const std::exception& e) {
      internal_error(responder, e.what());
    } catch (...) {
      internal_error(responder, "unknown exception");
    }
  }

  // The answer when a handler throws: no exception may leave the I/O thread, and this one cannot fail either.
  void internal_error(const Responder& responder, const std::string& what) {
    try {
      responder.json(500, {{"error", {{"message", "internal error: " + what}, {"type", "internal_error"}}}});
    } catch (...) {
      keep_alive_ = false;
      close();
    }
  }

  void write_response(Response res) {
    if (answered_) return;
    answered_ = true;
    add_common_headers(res.base());
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    if (impl_->on_response) impl_->on_response(route_, res.result_int());
    auto sp = std::make_shared<Response>(std::move(res));
    stream_.expires_after(std::chrono::seconds(60));
    http::async_write(stream_, *sp, [self = shared_from_this(), sp](beast::error_code ec, size_t) {
      if (ec || !self->keep_alive_) return self->close();
      self->do_read();
    });
  }

  void write_sse_header(int status) {
    if (answered_) return;
    answered_ = true;
    sse_ = true;
    auto res = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(status), 11);
    add_common_headers(res->base());
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-cache");
    res->keep_alive(keep_alive_);
    res->chunked(true);
    if (impl_->on_response) impl_->on_response(route_, status);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(60));
    http::async_write_header(stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->header_written_ = true;
      if (ec) return self->lost();
      self->pump();
    });
  }

  void pump() {
    if (writing_ || !header_written_ || chunks_.empty() || gone_) return;
    chunk c = std::move(chunks_.front());
    chunks_.pop_front();
    writing_ = true;
    stream_.expires_after(std::chrono::seconds(60));
    auto done = [self = shared_from_this(), c](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->lost();
      if (c.last) {
        if (!self->keep_alive_) return self->close();
        return self->do_read();
      }
      self->pump();
    };
    if (c.last) {
      if (c.data->empty()) {
        net::async_write(stream_, http::make_chunk_last(), std::move(done));
      } else {
        net::async_write(stream_, http::make_chunk(net::buffer(*c.data)),
                         [self = shared_from_this(), done = std::move(done)](beast::error_code ec, size_t n) mutable {
                           if (ec) return done(ec, n);
                           net::async_write(self->stream_, http::make_chunk_last(), std::move(done));
                         });
      }
    } else {
      net::async_write(stream_, http::make_chunk(net::buffer(*c.data)), std::move(done));
    }
  }

  void lost() {
    if (gone_) return;
    gone_ = true;
    chunks_.clear();
    if (on_gone_) {
      auto f = std::move(on_gone_);
      on_gone_ = nullptr;
      f();
    }
    close();
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (sse_ && !gone_) lost();
  }

  std::shared_ptr<HttpServer::Impl> impl_;  // first: the io_context outlives the socket
  ConnectionLimits::Ticket ticket_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string route_;
  std::atomic<uint64_t> exchange_{0};
  bool keep_alive_ = false;
  bool answered_ = false;
  bool sse_ = false, sse_ended_ = false, header_written_ = false, writing_ = false;
  std::atomic<bool> gone_{false};
  std::function<void()> on_gone_;
  std::deque<chunk> chunks_;
};

// ---------------------------------------------------------------------------------------------- Responder

void Responder::send(Response res) const { conn_->respond(exchange_, std::move(res)); }

void Responder::json(int status, const nlohmann::json& body) const {
  text(status, json_text(body), "application/json");
}

void Responder::text(int status, std::string body, const std::string& content_type) const {
  Response res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, content_type);
  res.body() = std::move(body);
  send(std::move(res));
}

std::shared_ptr<SseStream> Responder::start_sse(int status) const {
  conn_->sse_start(exchange_, status);
  return std::make_shared<SseStream>(conn_, exchange_);
}

void SseStream::event(const std::string& data) { conn_->sse_chunk(exchange_, "data: " + data + "\n\n", false); }
void SseStream::end() { conn_->sse_chunk(exchange_, "", true); }
bool SseStream::gone() const { return conn_->gone(); }
void SseStream::on_gone(std::function<void()> f) { conn_->set_on_gone(std::move(f)); }

// ---------------------------------------------------------------------------------------------- Server

void HttpServer::Impl::do_accept(std::shared_ptr<Impl> self) {
  acceptor->async_accept(net::make_strand(ioc), [self](beast::error_code ec, tcp::socket socket) {
    // Stopped: the acceptor closed (the close cancels this accept, whose handler may run on another thread before
    // the acceptor reads as closed there).
    if (!self->acceptor || !self->acceptor->is_open() || ec == net::error::operation_aborted) return;
    if (ec) {
      if (!self->accept_failing)
        std::cerr << "api: cannot accept connections (" << ec.message() << "); retrying every "
                  << kAcceptBackoff.count() << " ms\n";
      self->accept_failing = true;
      self->accept_backoff.expires_after(kAcceptBackoff);
      self->accept_backoff.async_wait([self](beast::error_code e) {
        if (!e) self->do_accept(self);
      });
      return;
    }
    self->accept_failing = false;
    beast::error_code peer_error;
    const auto peer = socket.remote_endpoint(peer_error);
    if (auto ticket = peer_error ? nullptr : self->connections->admit(address_block(peer.address()))) {
      auto c = std::make_shared<HttpConnection>(std::move(socket), self, std::move(ticket));
      Impl::track(self->http_open, self->mutex, c);
      c->start();
    } else {
      socket.close(peer_error);  // over a cap: closed before anything is read
    }
    self->do_accept(self);
  });
}

namespace {
// max_connections, held below what the process's open-file limit leaves after the descriptors it needs for
// everything else: past it accept() would fail for every client, not only the extra ones.
size_t connection_cap(size_t configured) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur == RLIM_INFINITY) return configured;
  const size_t allowed =
      files.rlim_cur > 2 * kReservedDescriptors ? files.rlim_cur - kReservedDescriptors : files.rlim_cur / 2;
  if (configured <= allowed) return configured;
  std::cerr << "api: max_connections " << configured << " is more than the open-file limit (" << files.rlim_cur
            << ") allows; holding at most " << allowed << " connections (raise it with ulimit -n)\n";
  return allowed;
}
}  // namespace

HttpServer::HttpServer(HttpLimits limits) : impl_(std::make_shared<Impl>(limits)) {}
HttpServer::~HttpServer() { stop(); }

void HttpServer::route(http::verb method, const std::string& path, Handler h) {
  impl_->routes[{method, path}] = std::move(h);
  impl_->paths.insert(path);
}
void HttpServer::websocket(const std::string& path, WsHandler h) { impl_->ws_routes[path] = std::move(h); }
void HttpServer::fallback(Handler h) { impl_->fallback = std::move(h); }
void HttpServer::on_response(std::function<void(const std::string&, int)> f) { impl_->on_response = std::move(f); }

uint16_t HttpServer::listen(const std::string& host, uint16_t port, int threads) {
  beast::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (ec) throw std::runtime_error("cannot listen on '" + host + "': not an IP address");
  tcp::endpoint ep{address, port};
  impl_->acceptor.emplace(impl_->ioc);
  auto fail = [&](const char* what) {
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) + " (" + what +
                             "): " + ec.message() +
                             (ec == net::error::address_in_use ? "; pick another port with --port" : ""));
  };
  impl_->acceptor->open(ep.protocol(), ec);
  if (ec) fail("open");
  impl_->acceptor->set_option(net::socket_base::reuse_address(true), ec);
  impl_->acceptor->bind(ep, ec);
  if (ec) fail("bind");
  impl_->acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  const uint16_t bound = impl_->acceptor->local_endpoint().port();
  impl_->connections = std::make_shared<ConnectionLimits>(connection_cap(impl_->limits.max_connections),
                                                          impl_->limits.max_connections_per_address);
  impl_->do_accept(impl_);
  for (int i = 0; i < threads; ++i) impl_->threads.emplace_back([impl = impl_] { impl->ioc.run(); });
  return bound;
}

void HttpServer::stop() {
  if (!impl_) return;
  auto impl = impl_;
  if (impl->threads.empty()) {  // never started (or a probe): just close the acceptor
    beast::error_code ec;
    if (impl->acceptor) impl->acceptor->close(ec);
    return;
  }
  net::post(impl->ioc, [impl] {
    beast::error_code ec;
    if (impl->acceptor) impl->acceptor->close(ec);
    impl->accept_backoff.cancel();
  });
  {
    std::lock_guard lock(impl->mutex);
    for (auto& w : impl->http_open)
      if (auto c = w.lock()) c->shutdown();
    for (auto& w : impl->ws_open)
      if (auto c = w.lock()) c->shutdown();
  }
  // Let the shutdowns run, then stop whatever is left.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  impl->ioc.stop();
  for (auto& t : impl->threads)
    if (t.joinable()) t.join();
  impl->threads.clear();
}

void check_can_listen(const std::string& host, uint16_t port) {
  HttpServer probe;
  probe.listen(host, port, 0);
}

// ---------------------------------------------------------------------------------------------- Helpers

std::string target_path(const std::string& target) {
  const auto q = target.find('?');
  return q == std::string::npos ? target : target.substr(0, q);
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> parse_form(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('&', start);
    if (end == std::string::npos) end = text.size();
    std::string_view item(text.data() + start, end - start);
    if (!item.empty()) {
      const auto eq = item.find('=');
      if (eq == std::string_view::npos)
        out.emplace_back(url_decode(item), "");
      else
        out.emplace_back(url_decode(item.substr(0, eq)), url_decode(item.substr(eq + 1)));
    }
    start = end + 1;
  }
  return out;
}

}  // namespace corolla::api
