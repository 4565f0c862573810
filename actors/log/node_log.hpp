// What a node tells its operator: one line per meaningful event (a session opened, closed or failed over, a server
// banned, blocks loaded, a move to other blocks, the DHT joined), levelled and named by the part of the node that
// speaks, on standard error. Quiet by default (warnings and errors only); `--log_level` or COROLLA_LOG choose more:
//
//   corolla serve ... --log_level info              every part at info
//   COROLLA_LOG=warn,session=debug corolla generate ...   a default, then parts by name
//
//   2026-12-06T07:51:25.123 session info: opened: route 127.0.0.1:31331 [0:15], 127.0.0.1:31332 [15:30]; max_length 64
//
// Messages are "what happened: details", details as "key value" pairs separated by ";" so that they grep well.
// The simulator turns these logs off (its event log says what happens there).
#pragma once

#include <string>
#include <string_view>

namespace corolla::log {

// The parts of a node that log, by the name each one's lines carry.
enum class Part { session, client, server, dht, balance };
enum class Level { trace, debug, info, warn, error };

// Whether `part` writes lines of `level` (building a line costs nothing when it does not).
bool enabled(Part part, Level level);
// One line (spdlog underneath, kept out of this header so that actors compile without it).
void write(Part part, Level level, std::string_view message);

// A line whose text `make` builds only when it is written: log::info(Part::dht, [&] { return "joined: ..."; }).
template <class Make>
void at(Part part, Level level, Make&& make) {
  if (enabled(part, level)) write(part, level, std::string(make()));
}
template <class Make>
void debug(Part part, Make&& make) {
  at(part, Level::debug, make);
}
template <class Make>
void info(Part part, Make&& make) {
  at(part, Level::info, make);
}
template <class Make>
void warn(Part part, Make&& make) {
  at(part, Level::warn, make);
}

// Sets levels from `spec`: "LEVEL" for every part, or comma-separated "PART=LEVEL" items, optionally after a
// default LEVEL ("warn,session=debug"). Levels: trace, debug, info, warn, error, off. Throws std::invalid_argument
// naming the item that is neither.
void configure(std::string_view spec);
// configure(COROLLA_LOG) when the variable is set; an invalid value throws like configure.
void configure_from_environment();

}  // namespace corolla::log
