#include "actors/log/node_log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

namespace corolla::log {
namespace {

constexpr std::array<const char*, 5> kPartNames = {"session", "client", "server", "dht", "balance"};

struct Registry {
  std::mutex mutex;  // guards creating loggers and setting levels; checking a level needs no lock
  std::array<std::atomic<int>, kPartNames.size()> levels;  // spdlog::level::level_enum of each part
  std::array<std::shared_ptr<spdlog::logger>, kPartNames.size()> loggers;
  std::shared_ptr<spdlog::sinks::stderr_sink_mt> sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  Registry() {
    for (auto& l : levels) l = spdlog::level::warn;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

spdlog::level::level_enum level_of(std::string_view text, std::string_view item) {
  static const std::pair<const char*, spdlog::level::level_enum> names[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug}, {"info", spdlog::level::info},
      {"warn", spdlog::level::warn},   {"error", spdlog::level::err},   {"off", spdlog::level::off}};
  for (const auto& [name, level] : names)
    if (text == name) return level;
  throw std::invalid_argument("log level '" + std::string(item) +
                              "': levels are trace, debug, info, warn, error, off (parts: session, client, server, "
                              "dht, balance; e.g. 'warn,session=info')");
}

spdlog::logger& logger_of(Part part) {
  Registry& r = registry();
  const auto i = static_cast<size_t>(part);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.loggers[i]) {
    r.loggers[i] = std::make_shared<spdlog::logger>(kPartNames[i], r.sink);
    r.loggers[i]->set_pattern("%Y-%m-%dT%H:%M:%S.%e %n %l: %v");
    r.loggers[i]->set_level(static_cast<spdlog::level::level_enum>(r.levels[i].load()));
  }
  return *r.loggers[i];
}

spdlog::level::level_enum spdlog_level(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
  }
  return spdlog::level::err;
}

}  // namespace

bool enabled(Part part, Level level) {
  return spdlog_level(level) >= registry().levels[static_cast<size_t>(part)].load(std::memory_order_relaxed);
}

void write(Part part, Level level, std::string_view message) {
  logger_of(part).log(spdlog_level(level), "{}", message);
}

void configure(std::string_view spec) {
  std::array<spdlog::level::level_enum, kPartNames.size()> levels;
  for (size_t i = 0; i < levels.size(); ++i)
    levels[i] = static_cast<spdlog::level::level_enum>(registry().levels[i].load());
  size_t start = 0;
  bool first = true;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      if (!first)
        throw std::invalid_argument("log level '" + std::string(item) + "': only the first item may be a bare level");
      levels.fill(level_of(item, item));
    } else {
      const std::string_view part = item.substr(0, eq);
      size_t i = 0;
      while (i < kPartNames.size() && part != kPartNames[i]) ++i;
      if (i == kPartNames.size())
        throw std::invalid_argument("log level '" + std::string(item) + "': no part named '" + std::string(part) +
                                    "' (parts: session, client, server, dht, balance)");
      levels[i] = level_of(item.substr(eq + 1), item);
    }
    first = false;
    start = comma + 1;
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < kPartNames.size(); ++i) {
    r.levels[i] = levels[i];
    if (r.loggers[i]) r.loggers[i]->set_level(levels[i]);
  }
}

void configure_from_environment() {
  if (const char* v = std::getenv("COROLLA_LOG"); v && *v) configure(v);
}

}  // namespace corolla::log
