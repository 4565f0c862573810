#include "actors/net/peer_gateway.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/send.hpp>
#include <caf/thread_hook.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "actors/net/address_block.hpp"
#include "actors/net/basp_filter.hpp"
#include "actors/net/peer_tls.hpp"

namespace corolla {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol::socket;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr size_t kStreamChunk = 256u << 10;  // a large frame's bytes move to CAF this many at a time
constexpr size_t kToPeerBuffer = 1u << 20;   // CAF's bytes move to the peer this many at a time
constexpr int kSocketPairBuffer = 4 << 20;   // kernel buffers of the pair joining a peer to CAF

basp_node_id node_bytes(const caf::node_id& node) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  basp_node_id id{};
  if (!sink(node) && buf.size() == id.size()) std::memcpy(id.data(), buf.data(), id.size());
  return id;
}

// A socket pair: [0] stays with the gateway, [1] becomes CAF's scribe.
bool make_pair(int fds[2], std::string& error) {
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    error = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    ::setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &kSocketPairBuffer, sizeof kSocketPairBuffer);
    ::setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &kSocketPairBuffer, sizeof kSocketPairBuffer);
  }
  return true;
}

// A peer's end of a connection: the TCP socket, or TLS over it (the gateway reads and writes clear bytes either
// way). One read and one write may be in flight at once, as with a socket.
class peer_link {
 public:
  explicit peer_link(tcp::socket s) : plain_(std::move(s)) {}
  // Puts TLS over the socket (before any byte moved).
  void secure(asio::ssl::context& ctx) { tls_.emplace(std::move(plain_), ctx); }
  bool secured() const { return tls_.has_value(); }
  asio::ssl::stream<tcp::socket>& tls() { return *tls_; }
  tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }

  template <class Buffers, class Handler>
  void read(const Buffers& b, Handler&& h) {
    if (tls_)
      asio::async_read(*tls_, b, std::forward<Handler>(h));
    else
      asio::async_read(plain_, b, std::forward<Handler>(h));
  }
  template <class Buffers, class Handler>
  void read_some(const Buffers& b, Handler&& h) {
    if (tls_)
      tls_->async_read_some(b, std::forward<Handler>(h));
    else
      plain_.async_read_some(b, std::forward<Handler>(h));
  }
  template <class Buffers, class Handler>
  void write(const Buffers& b, Handler&& h) {
    if (tls_)
      asio::async_write(*tls_, b, std::forward<Handler>(h));
    else
      asio::async_write(plain_, b, std::forward<Handler>(h));
  }
  void close() {
    boost::system::error_code ec;
    socket().close(ec);
  }

 private:
  tcp::socket plain_;
  std::optional<asio::ssl::stream<tcp::socket>> tls_;
};

// A TLS failure in words a user can act on: what OpenSSL says, and what usually causes it.
std::string tls_failure(const boost::system::error_code& ec, bool handshake_done) {
  std::string why = ec.message();
  if (why.find("certificate verify failed") != std::string::npos)
    return "TLS: the peer's certificate was not issued by this swarm's authority (" + why + ")";
  if (why.find("alert") != std::string::npos)
    return "TLS: the peer refused this node's certificate: a private swarm admits only certificates its "
           "authority issued (" +
           why + ")";
  if (!handshake_done || ec == asio::error::eof || ec == asio::ssl::error::stream_truncated)
    return "TLS: no TLS handshake with the peer: every node of a swarm must use the same TLS setting (" + why + ")";
  return "TLS: " + why;
}

// Refusals are logged at most once a second, with the count of those left out.
class refusal_log {
 public:
  void note(const std::string& what) {
    const auto now = clock_type::now();
    if (now - last_ < std::chrono::seconds(1)) {
      ++suppressed_;
      return;
    }
    if (suppressed_ > 0)
      std::fprintf(stderr, "peer gateway: %s (and %llu more since the last report)\n", what.c_str(),
                   static_cast<unsigned long long>(suppressed_));
    else
      std::fprintf(stderr, "peer gateway: %s\n", what.c_str());
    suppressed_ = 0;
    last_ = now;
  }

 private:
  clock_type::time_point last_{};
  uint64_t suppressed_ = 0;
};

}  // namespace

struct PeerGateway::impl {
  struct connection;

  impl(caf::actor_system& sys, const peer_limits& limits, std::shared_ptr<PeerTls> tls)
      : sys(sys),
        limits(limits),
        tls(std::move(tls)),
        self(node_bytes(sys.node())),
        work(asio::make_work_guard(io)),
        tick(io) {
    filter_limits.max_frame_bytes = limits.max_frame_bytes;
    filter_limits.max_handshake_bytes = limits.max_handshake_bytes;
    start_tick();
    thread = std::thread([this] {
      pthread_setname_np(pthread_self(), "corolla.peers");
      io.run();
      std::lock_guard<std::mutex> lock(stopped_mutex);
      stopped = true;
      stopped_cv.notify_all();
    });
  }

  ~impl() {
    asio::post(io, [this] {
      for (auto& [port, l] : listeners) l.acceptor->close();
      listeners.clear();
      for (auto& c : std::set<std::shared_ptr<connection>>(connections)) shut(c, std::nullopt);
      tick.cancel();
      work.reset();
    });
    // Closing every socket ends their operations, and the loop returns once none is left. A peer that stopped
    // reading (a frozen process) may still hold one that never ends: the node's shutdown must not wait on it
    // (it hung there for good), so after a grace period the loop is stopped with whatever it still holds.
    {
      std::unique_lock<std::mutex> lock(stopped_mutex);
      if (!stopped_cv.wait_for(lock, kShutdownGrace, [this] { return stopped; })) io.stop();
    }
    if (thread.joinable()) thread.join();
  }

  // --- listening -------------------------------------------------------------------------------------------

  struct listener {
    std::shared_ptr<tcp::acceptor> acceptor;
    caf::strong_actor_ptr whom;
    std::shared_ptr<asio::steady_timer> backoff;
  };

  void accept(uint16_t port) {
    auto it = listeners.find(port);
    if (it == listeners.end()) return;
    auto acceptor = it->second.acceptor;
    acceptor->async_accept([this, port, acceptor](const boost::system::error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
      if (ec) {
        // Out of file descriptors (or similar): wait instead of spinning on a listener that stays readable.
        log.note("accept failed: " + ec.message());
        auto l = listeners.find(port);
        if (l == listeners.end()) return;
        l->second.backoff->expires_after(std::chrono::milliseconds(100));
        l->second.backoff->async_wait([this, port](const boost::system::error_code& e) {
          if (!e) accept(port);
        });
        return;
      }
      admit(port, std::move(s));
      accept(port);
    });
  }

  struct address_book {
    size_t open = 0;
    double tokens = 0;
    clock_type::time_point refilled{};
  };

  // Applies the connection limits to an accepted peer, then joins it to CAF.
  void admit(uint16_t port, tcp::socket s) {
    boost::system::error_code ec;
    const auto remote = s.remote_endpoint(ec);
    if (ec) return;
    const auto address = address_block(remote.address());
    auto& book = addresses[address];
    const auto now = clock_type::now();
    const double burst = std::max(1.0, limits.new_connections_per_second);
    if (book.refilled == clock_type::time_point{}) book.tokens = burst;
    book.tokens = std::min(burst, book.tokens + limits.new_connections_per_second *
                                                    std::chrono::duration<double>(now - book.refilled).count());
    book.refilled = now;
    const char* refusal = connections.size() >= limits.max_connections      ? "too many connections"
                          : book.open >= limits.max_connections_per_address ? "too many connections from one address"
                          : book.tokens < 1                                 ? "connecting too often"
                                                                            : nullptr;
    if (refusal) {
      ++counters.refused;
      log.note(std::string("refused ") + address + ": " + refusal);
      if (book.open == 0 && book.tokens >= burst) addresses.erase(address);
      return;
    }
    book.tokens -= 1;
    auto l = listeners.find(port);
    if (l == listeners.end()) return;
    int fds[2];
    std::string error;
    if (!make_pair(fds, error)) {
      log.note(error);
      return;
    }
    auto c = start(basp_side::accepted, peer_link(std::move(s)), fds[0], address);
    ++counters.accepted;
    // CAF takes its end as a connection to the published actor and greets the peer with its handshake.
    auto whom = l->second.whom;
    auto& mm = sys.middleman();
    auto basp = mm.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
    int caf_fd = fds[1];
    mm.backend().dispatch([&mm, basp, caf_fd, port, whom] {
      auto scribe = mm.backend().new_scribe(caf_fd);
      caf::anon_send(basp, caf::publish_atom::value, std::move(scribe), port, whom, std::set<std::string>{});
    });
  }

  // --- connections -------------------------------------------------------------------------------------------

  struct connection {
    connection(asio::io_context& io, peer_link peer_link, basp_side side, std::string address)
        : peer(std::move(peer_link)), local(io), side(side), address(std::move(address)) {}
    peer_link peer;
    unix_socket local;
    basp_side side;
    std::string address;
    std::unique_ptr<BaspFilter> filter;
    bool closed = false;
    clock_type::time_point opened = clock_type::now();
    // From the peer: the frame being read.
    uint8_t header[kBaspHeaderSize];
    std::vector<uint8_t> payload;
    uint64_t stream_left = 0;  // bytes of a large frame still to move (or discard)
    bool discarding = false;
    uint64_t reserved = 0;      // budget held for the large frame CAF is receiving
    bool in_frame = false;      // between a header's first byte and the frame's last
    bool reading_peer = false;  // a read from the peer is pending
    clock_type::time_point read_started{};
    double frame_seconds = 0;  // time spent waiting on the peer within this frame
    uint64_t frame_bytes = 0;
    // To the peer.
    std::vector<uint8_t> out = std::vector<uint8_t>(kToPeerBuffer);
    bool writing_peer = false;
    clock_type::time_point write_started{};
    std::optional<basp_node_id> claimed;
  };

  // Joins a peer to CAF's end `local_fd`. An accepted peer with TLS on first completes the TLS handshake (within
  // the handshake deadline); a connected one has done it already (connect()), and the first byte the peer sent
  // then (`first_byte`) is the first of its first frame.
  std::shared_ptr<connection> start(basp_side side, peer_link link, int local_fd, const std::string& address,
                                    std::optional<uint8_t> first_byte = std::nullopt) {
    auto c = std::make_shared<connection>(io, std::move(link), side, address);
    boost::system::error_code ec;
    c->local.assign(asio::local::stream_protocol(), local_fd, ec);
    c->peer.socket().set_option(tcp::no_delay(true), ec);
    auto* raw = c.get();
    c->filter = std::make_unique<BaspFilter>(
        side, self, filter_limits, [this](const basp_node_id& n) { return claims.count(n) > 0; },
        [this, raw](const basp_node_id& n) {
          // A second inbound connection that claims a connected node would become CAF's route to it: it is
          // quarantined (CAF's connection timeout or the handshake deadline closes it). One we opened may (CAF closes
          // it as redundant).
          if (raw->side == basp_side::accepted && claims.count(n) > 0) return false;
          if (++claims[n] == 1) {
            boost::system::error_code ec;
            const auto remote = raw->peer.socket().remote_endpoint(ec);
            std::lock_guard<std::mutex> lock(origins_mutex);
            origins[n] = ec ? raw->address : address_block(remote.address());
          }
          raw->claimed = n;
          return true;
        });
    connections.insert(c);
    if (side == basp_side::accepted) ++addresses[address].open;
    if (side == basp_side::accepted && tls) {
      c->peer.secure(tls->context());
      c->peer.tls().async_handshake(asio::ssl::stream_base::server, [this, c](const boost::system::error_code& e) {
        if (c->closed) return;
        if (e) return shut(c, tls_failure(e, false));
        read_header(c);
        read_caf(c);
      });
      return c;
    }
    if (first_byte) {
      c->header[0] = *first_byte;
      read_header_rest(c);
    } else {
      read_header(c);
    }
    read_caf(c);
    return c;
  }

  void shut(const std::shared_ptr<connection>& c, const std::optional<std::string>& why) {
    if (c->closed) return;
    c->closed = true;
    if (why) {
      ++counters.closed_by_filter;
      log.note("closed " + c->address + ": " + *why);
    }
    boost::system::error_code ec;
    c->peer.close();
    c->local.close(ec);
    budget_used -= c->reserved;
    c->reserved = 0;
    if (c->claimed) {
      auto it = claims.find(*c->claimed);
      if (it != claims.end() && --it->second == 0) {
        claims.erase(it);
        std::lock_guard<std::mutex> lock(origins_mutex);
        origins.erase(*c->claimed);
      }
    }
    if (c->side == basp_side::accepted) {
      auto it = addresses.find(c->address);
      if (it != addresses.end() && it->second.open > 0) --it->second.open;
    }
    connections.erase(c);
  }

  // Peer -> CAF. A read from the peer is timed while a frame is arriving (the minimum receive rate).
  template <class Buffers, class Next>
  void read_peer(const std::shared_ptr<connection>& c, Buffers buffers, Next next) {
    c->reading_peer = true;
    c->read_started = clock_type::now();
    c->peer.read(buffers, [this, c, next](const boost::system::error_code& ec, size_t n) {
      c->reading_peer = false;
      if (c->closed) return;
      if (ec) return shut(c, std::nullopt);
      if (c->in_frame) {
        c->frame_seconds += std::chrono::duration<double>(clock_type::now() - c->read_started).count();
        c->frame_bytes += n;
      }
      next();
    });
  }

  template <class Buffers, class Next>
  void write_caf(const std::shared_ptr<connection>& c, Buffers buffers, Next next) {
    asio::async_write(c->local, buffers, [this, c, next](const boost::system::error_code& ec, size_t) {
      if (c->closed) return;
      if (ec) return shut(c, std::nullopt);
      next();
    });
  }

  void read_header(const std::shared_ptr<connection>& c) {
    c->in_frame = false;
    // The first byte may take as long as the peer likes (CAF's heartbeats keep idle connections honest);
    // the rest of the frame is timed.
    read_peer(c, asio::buffer(c->header, 1), [this, c] { read_header_rest(c); });
  }

  void read_header_rest(const std::shared_ptr<connection>& c) {
    c->in_frame = true;
    c->frame_seconds = 0;
    c->frame_bytes = 1;
    read_peer(c, asio::buffer(c->header + 1, kBaspHeaderSize - 1), [this, c] { on_header(c); });
  }

  void on_header(const std::shared_ptr<connection>& c) {
    const auto v = c->filter->on_header(c->header);
    if (v.verdict.kind == basp_verdict::close) return shut(c, v.verdict.why);
    if (v.payload_bytes == 0) {
      if (v.verdict.kind == basp_verdict::drop) return dropped(c), read_header(c);
      return write_caf(c, asio::buffer(c->header), [this, c] { read_header(c); });
    }
    c->payload.resize(v.judge_bytes);
    read_peer(c, asio::buffer(c->payload), [this, c, v] { on_payload(c, v); });
  }

  void on_payload(const std::shared_ptr<connection>& c, basp_header_verdict h) {
    const auto v = c->filter->on_payload(c->payload.data(), c->payload.size());
    if (v.kind == basp_verdict::close) return shut(c, v.why);
    const uint64_t rest = h.payload_bytes - h.judge_bytes;
    if (v.kind == basp_verdict::drop) {
      dropped(c);
      if (rest == 0) return read_header(c);
      c->discarding = true;
      c->stream_left = rest;
      return stream(c);
    }
    if (rest == 0) {
      return write_caf(c, std::array<asio::const_buffer, 2>{asio::buffer(c->header), asio::buffer(c->payload)},
                       [this, c] { read_header(c); });
    }
    // A large frame: CAF will hold all of it, so it waits for room in the budget first.
    c->discarding = false;
    c->stream_left = rest;
    reserve(c, h.payload_bytes, [this, c] {
      write_caf(c, std::array<asio::const_buffer, 2>{asio::buffer(c->header), asio::buffer(c->payload)},
                [this, c] { stream(c); });
    });
  }

  template <class Next>
  void reserve(const std::shared_ptr<connection>& c, uint64_t bytes, Next next) {
    if (budget_used + bytes <= limits.max_buffered_bytes || budget_used == 0) {
      budget_used += bytes;
      c->reserved = bytes;
      return next();
    }
    auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(5));
    timer->async_wait([this, c, bytes, next, timer](const boost::system::error_code&) {
      if (!c->closed) reserve(c, bytes, next);
    });
  }

  // Moves (or discards) the rest of a large frame, as its bytes arrive: waiting for whole chunks would add their
  // transfer time to the frame's latency at every hop.
  void stream(const std::shared_ptr<connection>& c) {
    if (c->stream_left == 0) {
      budget_used -= c->reserved;
      c->reserved = 0;
      return read_header(c);
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(c->stream_left, kStreamChunk));
    c->payload.resize(n);
    c->reading_peer = true;
    c->read_started = clock_type::now();
    c->peer.read_some(asio::buffer(c->payload), [this, c](const boost::system::error_code& ec, size_t got) {
      c->reading_peer = false;
      if (c->closed) return;
      if (ec) return shut(c, std::nullopt);
      c->frame_seconds += std::chrono::duration<double>(clock_type::now() - c->read_started).count();
      c->frame_bytes += got;
      c->stream_left -= got;
      if (c->discarding) return stream(c);
      write_caf(c, asio::buffer(c->payload.data(), got), [this, c] { stream(c); });
    });
  }

  void dropped(const std::shared_ptr<connection>&) { ++counters.dropped_frames; }

  // CAF -> peer, as it comes; a write the peer does not take in time closes it.
  void read_caf(const std::shared_ptr<connection>& c) {
    c->local.async_read_some(asio::buffer(c->out), [this, c](const boost::system::error_code& ec, size_t n) {
      if (c->closed) return;
      if (ec) return shut(c, std::nullopt);
      c->writing_peer = true;
      c->write_started = clock_type::now();
      c->peer.write(asio::buffer(c->out.data(), n), [this, c](const boost::system::error_code& e, size_t) {
        c->writing_peer = false;
        if (c->closed) return;
        if (e) return shut(c, std::nullopt);
        read_caf(c);
      });
    });
  }

  // --- deadlines -----------------------------------------------------------------------------------------------

  void start_tick() {
    tick.expires_after(std::chrono::milliseconds(250));
    tick.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      check_deadlines();
      start_tick();
    });
  }

  void check_deadlines() {
    const auto now = clock_type::now();
    const double grace = std::chrono::duration<double>(limits.receive_grace).count();
    for (auto& c : std::set<std::shared_ptr<connection>>(connections)) {
      if (!c->filter->peer() && now - c->opened > limits.handshake_timeout) {
        shut(c, "no handshake in time");
        continue;
      }
      if (c->writing_peer && now - c->write_started > limits.write_timeout) {
        shut(c, "peer does not read");
        continue;
      }
      if (c->in_frame && c->reading_peer) {
        const double waited = c->frame_seconds + std::chrono::duration<double>(now - c->read_started).count();
        if (waited > grace && static_cast<double>(c->frame_bytes) <
                                  (waited - grace) * static_cast<double>(limits.min_receive_bytes_per_second))
          shut(c, "sending too slowly");
      }
    }
    // Forget addresses with nothing open and a full bucket.
    for (auto it = addresses.begin(); it != addresses.end();) {
      const bool idle =
          it->second.open == 0 &&
          now - it->second.refilled > std::chrono::duration<double>(std::max(1.0, limits.new_connections_per_second) /
                                                                    std::max(1e-3, limits.new_connections_per_second));
      it = idle ? addresses.erase(it) : std::next(it);
    }
    counters.open = connections.size();
    std::lock_guard<std::mutex> lock(stats_mutex);
    published_stats = counters;
  }

  caf::actor_system& sys;
  peer_limits limits;
  std::shared_ptr<PeerTls> tls;
  basp_filter_limits filter_limits;
  basp_node_id self;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  asio::steady_timer tick;
  std::thread thread;
  std::mutex stopped_mutex;  // the loop has returned: `stopped`, under this mutex, signalled by stopped_cv
  std::condition_variable stopped_cv;
  bool stopped = false;
  static constexpr std::chrono::seconds kShutdownGrace{2};
  std::map<uint16_t, listener> listeners;
  std::set<std::shared_ptr<connection>> connections;
  std::map<std::string, address_book> addresses;
  std::map<basp_node_id, int> claims;
  mutable std::mutex origins_mutex;             // origins is read by other threads (address_of)
  std::map<basp_node_id, std::string> origins;  // each claimed node's IP address (of its first connection)
  uint64_t budget_used = 0;
  peer_gateway_stats counters;
  refusal_log log;
  mutable std::mutex stats_mutex;
  peer_gateway_stats published_stats;
};

// --- the gateway's public face ---------------------------------------------------------------------------------

PeerGateway::PeerGateway(caf::actor_system& sys, const peer_limits& limits, std::shared_ptr<PeerTls> tls)
    : impl_(std::make_unique<impl>(sys, limits, std::move(tls))) {}

PeerGateway::~PeerGateway() = default;

caf::expected<uint16_t> PeerGateway::publish(const caf::actor& whom, const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
  if (ec) return caf::make_error(caf::sec::cannot_open_port, "cannot listen on '" + host + "': " + ec.message());
  auto acceptor = std::make_shared<tcp::acceptor>(impl_->io);
  tcp::endpoint ep(address, port);
  acceptor->open(ep.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor->bind(ep, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    const std::string hint =
        ec == asio::error::address_in_use ? "; pick another port with --port (0: any free one)" : "";
    return caf::make_error(caf::sec::cannot_open_port,
                           "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message() + hint);
  }
  const uint16_t bound = acceptor->local_endpoint(ec).port();
  auto whom_ptr = caf::actor_cast<caf::strong_actor_ptr>(whom);
  auto backoff = std::make_shared<asio::steady_timer>(impl_->io);
  asio::post(impl_->io, [this, acceptor, whom_ptr, bound, backoff] {
    impl_->listeners[bound] = impl::listener{acceptor, whom_ptr, backoff};
    impl_->accept(bound);
  });
  return bound;
}

void PeerGateway::unpublish(uint16_t port) {
  asio::post(impl_->io, [this, port] {
    auto it = impl_->listeners.find(port);
    if (it == impl_->listeners.end()) return;
    boost::system::error_code ec;
    it->second.acceptor->close(ec);
    it->second.backoff->cancel();
    impl_->listeners.erase(it);
  });
}

void PeerGateway::connect(const std::string& host, uint16_t port, std::function<void(int fd, std::string error)> done) {
  asio::post(impl_->io, [this, host, port, done = std::move(done)]() mutable {
    auto* d = impl_.get();
    if (d->connections.size() >= d->limits.max_connections) return done(-1, "too many peer connections");
    auto resolver = std::make_shared<tcp::resolver>(d->io);
    auto socket = std::make_shared<tcp::socket>(d->io);
    auto timer = std::make_shared<asio::steady_timer>(d->io, std::chrono::seconds(10));
    auto finished = std::make_shared<bool>(false);
    // The link, once connected (and, with TLS, once the handshake is done and the peer's first byte came).
    auto link = std::make_shared<std::optional<peer_link>>();
    auto first = std::make_shared<uint8_t>(0);
    auto finish = [d, socket, link, first, timer, finished, done](const std::string& error) mutable {
      if (*finished) return;
      *finished = true;
      timer->cancel();
      if (!error.empty()) {
        boost::system::error_code ec;
        socket->close(ec);
        if (*link) (*link)->close();
        return done(-1, error);
      }
      int fds[2];
      std::string pair_error;
      if (!make_pair(fds, pair_error)) return done(-1, pair_error);
      std::optional<uint8_t> first_byte;
      if ((*link)->secured()) first_byte = *first;
      d->start(basp_side::connected, std::move(**link), fds[0], "", first_byte);
      done(fds[1], "");
    };
    timer->async_wait([finish, resolver, socket, link](const boost::system::error_code& ec) mutable {
      if (ec) return;
      resolver->cancel();
      boost::system::error_code ignored;
      socket->cancel(ignored);
      if (*link) (*link)->socket().cancel(ignored);
      finish("connection timed out");
    });
    // With TLS: the handshake, then the peer's first byte. TLS 1.3 completes the client's handshake before the
    // peer has checked this node's certificate, so a refusal shows only as the first read failing; reading one
    // byte here turns it into this connection's error instead of a broken CAF handshake later.
    auto secure = [d, socket, link, first, finish]() mutable {
      link->emplace(std::move(*socket));
      (*link)->secure(d->tls->context());
      (*link)->tls().async_handshake(
          asio::ssl::stream_base::client, [link, first, finish](const boost::system::error_code& e) mutable {
            if (e) return finish(tls_failure(e, false));
            (*link)->read(asio::buffer(first.get(), 1), [finish](const boost::system::error_code& r, size_t) mutable {
              finish(r ? tls_failure(r, true) : std::string());
            });
          });
    };
    resolver->async_resolve(host, std::to_string(port),
                            [d, finish, secure, resolver, socket, link](const boost::system::error_code& ec,
                                                                        tcp::resolver::results_type results) mutable {
                              if (ec) return finish("cannot resolve: " + ec.message());
                              asio::async_connect(*socket, results,
                                                  [d, finish, secure, socket, link](const boost::system::error_code& e,
                                                                                    const tcp::endpoint&) mutable {
                                                    if (e) return finish(e.message());
                                                    if (d->tls) return secure();
                                                    link->emplace(std::move(*socket));
                                                    finish(std::string());
                                                  });
                            });
  });
}

peer_gateway_stats PeerGateway::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->published_stats;
}

// --- one gateway per actor system, stopped with its multiplexer -------------------------------------------------

struct peer_gateway_registry {
  std::mutex mutex;
  std::map<caf::actor_system*, std::shared_ptr<PeerGateway>> gateways;
  std::set<caf::actor_system*> enabled;

  static peer_gateway_registry& get() {
    static peer_gateway_registry r;
    return r;
  }

  std::shared_ptr<PeerGateway> of(caf::actor_system& sys) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = gateways.find(&sys);
    if (it != gateways.end()) return it->second;
    if (!enabled.count(&sys))
      throw std::logic_error("this actor system has no peer gateway (enable_peer_gateway on its config)");
    const auto* settings = dynamic_cast<const peer_gateway_settings*>(&sys.config());
    std::shared_ptr<PeerGateway> g(
        new PeerGateway(sys, settings ? settings->peers : peer_limits{}, settings ? settings->tls : nullptr));
    gateways.emplace(&sys, g);
    return g;
  }

  void stop(caf::actor_system& sys) {
    std::shared_ptr<PeerGateway> g;  // destroyed (its thread joined) outside the lock
    {
      std::lock_guard<std::mutex> lock(mutex);
      enabled.erase(&sys);
      auto it = gateways.find(&sys);
      if (it == gateways.end()) return;
      g = std::move(it->second);
      gateways.erase(it);
    }
  }
};

namespace {

class gateway_hook : public caf::thread_hook {
 public:
  void init(caf::actor_system& sys) override {
    sys_ = &sys;
    std::lock_guard<std::mutex> lock(peer_gateway_registry::get().mutex);
    peer_gateway_registry::get().enabled.insert(&sys);
  }
  void thread_started() override {}
  void thread_terminates() override {
    // The gateway hands connections to the multiplexer, so it stops with it (the system is still whole then).
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (sys_ && std::strcmp(name, "caf.multiplexer") == 0) peer_gateway_registry::get().stop(*sys_);
  }

 private:
  caf::actor_system* sys_ = nullptr;
};

}  // namespace

std::shared_ptr<PeerGateway> PeerGateway::of(caf::actor_system& sys) { return peer_gateway_registry::get().of(sys); }

std::optional<std::string> PeerGateway::address_of(const caf::node_id& node) const {
  if (!node) return std::nullopt;
  const basp_node_id id = node_bytes(node);
  std::lock_guard<std::mutex> lock(impl_->origins_mutex);
  auto it = impl_->origins.find(id);
  if (it == impl_->origins.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> peer_address_of(caf::actor_system& sys, const caf::node_id& node) {
  std::shared_ptr<PeerGateway> g;
  {
    auto& registry = peer_gateway_registry::get();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.gateways.find(&sys);
    if (it == registry.gateways.end()) return std::nullopt;
    g = it->second;
  }
  return g->address_of(node);
}

void enable_peer_gateway(caf::actor_system_config& cfg) { cfg.add_thread_hook<gateway_hook>(); }

caf::expected<uint16_t> publish_to_peers(caf::actor_system& sys, const caf::actor& whom, const std::string& host,
                                         uint16_t port) {
  return PeerGateway::of(sys)->publish(whom, host, port);
}

void unpublish_from_peers(caf::actor_system& sys, uint16_t port) {
  PeerGateway::of(sys)->unpublish(port);
  caf::anon_send(sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP")), caf::close_atom::value, port);
}

std::string listen_error_text(const caf::error& e) {
  if (e.context().match_elements<std::string>()) return e.context().get_as<std::string>(0);
  return caf::to_string(e);
}

}  // namespace corolla
