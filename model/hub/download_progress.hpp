// What a download shows while it runs: on a terminal a bar redrawn in place (at most ten times a second); in a log
// (standard error not a terminal) one line when it starts and one when it ends, so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace corolla::hub {

class DownloadProgress {
 public:
  // `already`: bytes present before (a resumed download).
  DownloadProgress(std::string label, uint64_t total, uint64_t already = 0);
  void add(uint64_t bytes);
  // The closing line ("label: 12.0 MiB in 1.3 s (9.2 MiB/s)").
  void finish();

 private:
  void draw();

  std::string label_;
  uint64_t total_;
  uint64_t done_;
  uint64_t start_done_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "12.0 MiB", "512 B".
std::string size_text(uint64_t bytes);

}  // namespace corolla::hub
