// Long-running commands (serve, dht, api, run) stop cleanly on SIGINT or SIGTERM: call block_stop_signals()
// before starting any thread of our own, then the main thread waits in wait_for_stop_signal().
//
// Blocking the signals and sigwait()ing is not enough: libraries start threads before main (the BLAS library's
// pool), and a signal delivered to one of them would take its default action and kill the process without a
// graceful stop. So a handler catches the signal in whichever thread it lands and wakes the waiting thread
// through a pipe (writing to a pipe is async-signal-safe).
#pragma once

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <unistd.h>

namespace corolla::cli {

inline int* stop_pipe() {
  static int fds[2] = {-1, -1};
  return fds;
}

inline void on_stop_signal(int sig) {
  const int saved = errno;
  const char c = static_cast<char>(sig);
  [[maybe_unused]] ssize_t n = ::write(stop_pipe()[1], &c, 1);
  errno = saved;
}

// Installs the handler for SIGINT and SIGTERM (the name is historical: nothing is blocked any more).
inline void block_stop_signals() {
  int* fds = stop_pipe();
  if (fds[0] >= 0) return;
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Returns the signal received.
inline int wait_for_stop_signal() {
  char c = 0;
  while (::read(stop_pipe()[0], &c, 1) < 0 && errno == EINTR) {
  }
  return c;
}

}  // namespace corolla::cli
