// How many connections the HTTP server holds: in all, and from one remote address. Every connection holds a
// ticket from accept to close; a connection over either cap gets none and is closed at once, before anything
// is read from it, so a flood of idle sockets costs one accept each and never the server's descriptors.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace corolla::api {

class ConnectionLimits : public std::enable_shared_from_this<ConnectionLimits> {
 public:
  ConnectionLimits(size_t max_total, size_t max_per_address)
      : max_total_(max_total), max_per_address_(max_per_address) {}

  // A ticket for a connection from `address` (released when the last copy goes), or nullptr when a cap is
  // reached. Thread-safe.
  using Ticket = std::shared_ptr<void>;
  Ticket admit(const std::string& address);
  size_t open() const;

 private:
  void release(const std::string& address);

  const size_t max_total_, max_per_address_;
  mutable std::mutex mutex_;
  size_t total_ = 0;
  std::map<std::string, size_t> per_address_;
};

}  // namespace corolla::api
