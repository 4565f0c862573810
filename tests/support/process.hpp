// Child processes for end-to-end tests: started with fork/exec, their stdout read line by line, and always
// stopped by their PID (SIGTERM, then SIGKILL) when the test is done with them.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

class ChildProcess {
 public:
  // `with_stderr`: the child's stderr comes through read_line() too (to read its error messages).
  ChildProcess(const std::string& program, const std::vector<std::string>& args, bool with_stderr = false) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      if (with_stderr) dup2(out[1], STDERR_FILENO);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { stop(); }

  pid_t pid() const { return pid_; }

  // The next line of stdout, or throws after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) throw std::runtime_error("timed out waiting for output of pid " + std::to_string(pid_));
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(out_fd_, chunk, sizeof chunk);
      if (n <= 0) throw std::runtime_error("pid " + std::to_string(pid_) + " closed its output (exited?)");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Sends a signal (SIGSTOP, SIGCONT, ...) to the child.
  void signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  // SIGTERM, then SIGKILL if it has not exited within `grace`; returns the exit status (or -1).
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(5)) {
    if (pid_ <= 0) return status_;
    kill(pid_, SIGCONT);
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    int st = 0;
    while (waitpid(pid_, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &st, 0);
        break;
      }
      usleep(10000);
    }
    status_ = st;
    pid_ = -1;
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
    return status_;
  }

  // kill -9 and reap.
  void kill_hard() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string buffer_;
};

// The resident memory of process `pid`, in bytes (0 when it cannot be read).
inline size_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  for (size_t kb = 0; in >> key;) {
    if (key == "VmRSS:") return (in >> kb, kb * 1024);
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

// The `corolla` binary tests start: the build's, or $COROLLA_TEST_CLI (to show that a test fails on an older build).
inline std::string corolla_cli() {
  const char* p = std::getenv("COROLLA_TEST_CLI");
  return p && *p ? std::string(p) : std::string(COROLLA_BIN_DIR) + "/corolla";
}

// `corolla serve` with the given flags; waits for its "serving blocks A:B of M at HOST:PORT" line.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> flags)
      : process_(corolla_cli(), with_serve(std::move(flags))) {
    const std::string line = process_.read_line();
    const auto at = line.rfind(" at ");
    if (line.rfind("serving blocks", 0) != 0 || at == std::string::npos)
      throw std::runtime_error("unexpected server output: " + line);
    address_ = line.substr(at + 4);
    line_ = line;
  }
  const std::string& address() const { return address_; }
  // The "serving blocks A:B of M at HOST:PORT" line.
  const std::string& line() const { return line_; }
  ChildProcess& process() { return process_; }

 private:
  static std::vector<std::string> with_serve(std::vector<std::string> flags) {
    flags.insert(flags.begin(), "serve");
    return flags;
  }
  ChildProcess process_;
  std::string address_;
  std::string line_;
};

// `corolla dht` with the given flags; waits for its "dht node at HOST:PORT" line.
class DhtProcess {
 public:
  explicit DhtProcess(std::vector<std::string> flags)
      : process_(corolla_cli(), with_dht(std::move(flags))) {
    const std::string line = process_.read_line();
    const std::string prefix = "dht node at ";
    if (line.rfind(prefix, 0) != 0) throw std::runtime_error("unexpected DHT node output: " + line);
    address_ = line.substr(prefix.size());
  }
  const std::string& address() const { return address_; }
  ChildProcess& process() { return process_; }

 private:
  static std::vector<std::string> with_dht(std::vector<std::string> flags) {
    flags.insert(flags.begin(), "dht");
    return flags;
  }
  ChildProcess process_;
  std::string address_;
};

}  // namespace corolla::test
