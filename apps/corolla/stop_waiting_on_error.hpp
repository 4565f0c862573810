// A command that fails (an exception leaves it) has not told its actors to stop: the DHT node, the connector
// and what they spawned keep running, and the actor system's destructor, which by default waits for every actor,
// would wait forever. The error would never be printed and the process never exit (a server whose bootstrap
// failed hung until SIGKILL). Declared right after the actor system, this guard is destroyed just before it and,
// only while an exception unwinds, lets the system shut down without waiting: the process is about to report the
// error and exit.
#pragma once

#include <caf/actor_system.hpp>
#include <exception>

namespace corolla::cli {

class stop_waiting_on_error {
 public:
  explicit stop_waiting_on_error(caf::actor_system& sys) : sys_(sys) {}
  stop_waiting_on_error(const stop_waiting_on_error&) = delete;
  stop_waiting_on_error& operator=(const stop_waiting_on_error&) = delete;
  ~stop_waiting_on_error() {
    if (std::uncaught_exceptions() > exceptions_) sys_.await_actors_before_shutdown(false);
  }

 private:
  caf::actor_system& sys_;
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace corolla::cli
