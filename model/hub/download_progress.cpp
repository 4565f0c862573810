#include "model/hub/download_progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace corolla::hub {

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const double b = static_cast<double>(bytes);
  if (bytes < (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else if (bytes < (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  return buf;
}

DownloadProgress::DownloadProgress(std::string label, uint64_t total, uint64_t already)
    : label_(std::move(label)),
      total_(total),
      done_(already),
      start_done_(already),
      terminal_(isatty(2) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (terminal_) {
    draw();
  } else {
    std::cerr << "downloading " << label_ << " (" << size_text(total_)
              << (already ? ", resuming after " + size_text(already) : std::string()) << ")" << std::endl;
  }
}

void DownloadProgress::add(uint64_t bytes) {
  done_ += bytes;
  if (!terminal_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  draw();
}

void DownloadProgress::draw() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_ - start_done_) / seconds : 0;
  const double fraction = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int percent = static_cast<int>(100.0 * std::min(fraction, 1.0));
  const int filled = percent / 5;
  std::cerr << "\r" << label_ << " [" << std::string(filled, '#') << std::string(20 - filled, ' ') << "] " << percent
            << "% " << size_text(done_) << "/" << size_text(total_) << " " << size_text(static_cast<uint64_t>(rate))
            << "/s   " << std::flush;
}

void DownloadProgress::finish() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_ - start_done_) / seconds : 0;
  char line[64];
  std::snprintf(line, sizeof line, " in %.1f s (%s/s)", seconds, size_text(static_cast<uint64_t>(rate)).c_str());
  if (terminal_) std::cerr << "\r" << std::string(label_.size() + 60, ' ') << "\r";
  std::cerr << label_ << ": " << size_text(done_ - start_done_) << line << std::endl;
}

}  // namespace corolla::hub
