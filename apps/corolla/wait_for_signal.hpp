// Long-running commands (serve, dht, api) stop cleanly on SIGINT or SIGTERM: the signals are blocked in every
// thread (call block_stop_signals() before starting any), and the main thread waits for one.
#pragma once

#include <csignal>
#include <pthread.h>

namespace corolla::cli {

inline sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

inline void block_stop_signals() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Returns the signal received.
inline int wait_for_stop_signal() {
  sigset_t set = stop_signals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace corolla::cli
