// A TCP relay on 127.0.0.1 that keeps a copy of every byte it passes, both ways: what anyone on the path between
// two nodes could read. Tests point a node's announced address at it (announce_address) and then look for
// plaintext in what it saw. Stopped (its threads joined, its sockets closed) when destroyed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace corolla::test {

// A port nobody listens on right now (bound and released: the caller takes it at once).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("cannot find a free port");
  ::close(fd);
  return ntohs(addr.sin_port);
}

class RecordingProxy {
 public:
  explicit RecordingProxy(uint16_t target_port) : target_(target_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    socklen_t len = sizeof addr;
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_, 64) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("the recording proxy cannot listen");
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  RecordingProxy(const RecordingProxy&) = delete;
  RecordingProxy& operator=(const RecordingProxy&) = delete;
  ~RecordingProxy() {
    stop_ = true;
    acceptor_.join();  // no relay starts after this
    for (auto& t : relays_) t.join();
    ::close(listener_);
  }

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Every byte relayed so far, both directions, in arrival order.
  std::string captured() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return captured_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(target_);
      inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
      if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      relays_.emplace_back([this, client, server] { relay(client, server); });
    }
  }

  // Copies both ways until either side closes or the proxy stops.
  void relay(int a, int b) {
    std::vector<char> buf(1 << 16);
    bool open = true;
    while (open && !stop_) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(p[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
          open = false;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mutex_);
          captured_.append(buf.data(), static_cast<size_t>(n));
        }
        const int to = p[i].fd == a ? b : a;
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t k = ::send(to, buf.data() + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
          if (k <= 0) {
            open = false;
            break;
          }
          sent += k;
        }
      }
    }
    ::close(a);
    ::close(b);
  }

  uint16_t target_;
  uint16_t port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::string captured_;
  std::thread acceptor_;
  std::vector<std::thread> relays_;  // touched by the acceptor only, until it is joined
};

}  // namespace corolla::test
