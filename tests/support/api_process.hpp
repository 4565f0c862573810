// `corolla run` on the tiny golden Llama as a child process (its DHT node, one server and the API in one
// process, as a user runs it), for tests that attack the API port. Stopped by PID when the object goes.
#pragma once

#include <string>
#include <vector>

#include "support/http_client.hpp"
#include "support/process.hpp"

namespace corolla::test {

class ApiProcess {
 public:
  // `prefix`: a program the command runs under (e.g. {"/usr/bin/prlimit", "--nofile=1024:1024"}); `extra`: more
  // flags for `corolla run`.
  explicit ApiProcess(std::vector<std::string> extra = {}, std::vector<std::string> prefix = {})
      : process_(program(prefix), args(prefix, extra)) {
    for (;;) {
      const std::string line = process_.read_line(std::chrono::seconds(120));
      const std::string mark = "chat page: http://127.0.0.1:";
      if (line.rfind(mark, 0) == 0) {
        port_ = static_cast<uint16_t>(std::stoi(line.substr(mark.size())));
        break;
      }
    }
  }
  uint16_t port() const { return port_; }
  ChildProcess& process() { return process_; }
  // Whether the process still answers GET /v1/models with 200.
  bool serving() {
    try {
      return get(port_, "/v1/models").status == 200;
    } catch (const std::exception&) {
      return false;
    }
  }

 private:
  static std::string program(const std::vector<std::string>& prefix) {
    return prefix.empty() ? corolla_cli() : prefix.front();
  }
  static std::vector<std::string> args(const std::vector<std::string>& prefix, const std::vector<std::string>& extra) {
    std::vector<std::string> out(prefix.empty() ? prefix.begin() : prefix.begin() + 1, prefix.end());
    if (!prefix.empty()) out.push_back(corolla_cli());
    const std::string data = COROLLA_TEST_DATA;
    for (const char* a : {"run", "--port", "0", "--servers", "1", "--threads", "1"}) out.push_back(a);
    out.insert(out.end(), {"--model", data + "/models/llama", "--tokenizer", data + "/tokenizers/bpe-tiny256"});
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }
  ChildProcess process_;
  uint16_t port_ = 0;
};

}  // namespace corolla::test
