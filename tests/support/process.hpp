// Child processes for end-to-end tests: started with fork/exec, their stdout read line by line, and always
// stopped by their PID (SIGTERM, then SIGKILL) when the test is done with them. Their stderr (a server's progress
// lines) is kept in memory rather than mixed into the test's output, where the lines of a few dozen servers buried
// the one failed check in CI's excerpt; it is printed when the child ends badly (a crash, an exit status other than
// 0) and is readable with error_output().
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace corolla::test {

class ChildProcess {
 public:
  // `with_stderr`: the child's stderr comes through read_line() too (to read its error messages).
  ChildProcess(const std::string& program, const std::vector<std::string>& args, bool with_stderr = false)
      : program_(program) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    if (!with_stderr) err_fd_ = memfd_create("child-stderr", MFD_CLOEXEC);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      if (with_stderr)
        dup2(out[1], STDERR_FILENO);
      else if (err_fd_ >= 0)
        dup2(err_fd_, STDERR_FILENO);
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
  ~ChildProcess() {
    stop();
    if (err_fd_ >= 0) close(err_fd_);
  }

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
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        throw std::runtime_error("timed out waiting for output of pid " + std::to_string(pid_) + "; its stderr:\n" +
                                 error_output());
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(out_fd_, chunk, sizeof chunk);
      if (n <= 0)
        throw std::runtime_error("pid " + std::to_string(pid_) + " closed its output (exited?); its stderr:\n" +
                                 error_output());
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
    report_if_bad(st, SIGTERM);
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
    report_if_bad(status_, SIGKILL);
    pid_ = -1;
  }

  // What the child wrote to stderr so far (empty when it goes through read_line()).
  std::string error_output() const {
    std::string text;
    if (err_fd_ < 0) return text;
    char chunk[4096];
    for (off_t at = 0;;) {
      const ssize_t n = pread(err_fd_, chunk, sizeof chunk, at);
      if (n <= 0) break;
      text.append(chunk, static_cast<size_t>(n));
      at += n;
    }
    return text;
  }

 private:
  // A child that crashed or exited with a status other than 0 (other than by the signal the test sent): its
  // stderr goes to the test's, where the failure it explains is reported.
  void report_if_bad(int st, int sent) const {
    const bool fine = (WIFEXITED(st) && WEXITSTATUS(st) == 0) || (WIFSIGNALED(st) && WTERMSIG(st) == sent);
    if (fine) return;
    std::fprintf(stderr, "--- %s (pid %d) ended with status %d; its stderr:\n%s--- end of pid %d's stderr\n",
                 program_.c_str(), static_cast<int>(pid_), st, error_output().c_str(), static_cast<int>(pid_));
  }

  std::string program_;
  pid_t pid_ = -1;
  int err_fd_ = -1;
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
  explicit ServerProcess(std::vector<std::string> flags) : process_(corolla_cli(), with_serve(std::move(flags))) {
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
  explicit DhtProcess(std::vector<std::string> flags) : process_(corolla_cli(), with_dht(std::move(flags))) {
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
