// Reading Corolla's TOML configuration files (nodes, clients, local swarms): typed keys with range checks,
// unknown keys reported as errors with a suggestion, and every message naming the file, the line and the key:
//   config/node.toml:7: unknown key 'num_block' (did you mean 'num_blocks'?)
//   config/node.toml:3: 'port' must be an integer in 0..65535, got "abc"
// Also the value checks shared by files and command-line flags, and a small TOML writer for printing a resolved
// configuration. Plain C++ and toml++; include it from .cpp files only (toml++ is a large header).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "actors/config/config_error.hpp"

namespace corolla {

// Parses a TOML file. A missing or unreadable file gives "PATH: cannot read the file: REASON"; broken syntax
// gives "PATH:LINE:COLUMN: invalid TOML: PARSER MESSAGE".
toml::table parse_config_file(const std::string& path);
// A configuration file's text ("PATH: cannot read the file: REASON" when it cannot be read).
std::string read_config_file(const std::string& path);
// parse_config_file for text already in memory; `source` stands for the path in messages.
toml::table parse_config_text(std::string_view text, const std::string& source);

// How a value looks in a message: strings quoted ("abc"), numbers and booleans as written, "a table", arrays
// inline.
std::string describe_value(const toml::node& node);

// Collects a file's problems so that they are reported together rather than one per try. While one is alive on
// this thread, TableReader's getters and finish() record what they find (a getter then returns false, as for an
// absent key) instead of throwing; check() throws them all, a line each, as one ConfigError, and a rule that stops
// the reading (TableReader::fail) throws its problem after those found before it.
class ConfigProblems {
 public:
  ConfigProblems();
  ~ConfigProblems();
  ConfigProblems(const ConfigProblems&) = delete;
  ConfigProblems& operator=(const ConfigProblems&) = delete;
  // `line` (0: unknown) orders the problems as the file does.
  void add(std::string message, int64_t line) { problems_.push_back({line, std::move(message)}); }
  // Throws ConfigError holding every problem recorded, in file order, when there is one.
  void check() const;
  // The collector alive on this thread (the innermost), or nullptr.
  static ConfigProblems* current();

 private:
  std::vector<std::pair<int64_t, std::string>> problems_;
  ConfigProblems* outer_;
};

// Reads the keys of one table. Every getter records its key as known (present or not), so call every getter a
// table may hold before finish(), which reports the keys nobody asked for (the first one, without a
// ConfigProblems). A getter returns true and writes `out` when the key is present with a good value, returns false
// (leaving `out`) when it is absent, and when the value has the wrong type or range throws ConfigError, or, while
// a ConfigProblems collects, records the problem and returns false. `prefix` names the table in messages
// ("server[1].").
class TableReader {
 public:
  TableReader(const toml::table& table, std::string source, std::string prefix = "");

  bool get_string(std::string_view key, std::string& out);
  bool get_bool(std::string_view key, bool& out);
  bool get_int(std::string_view key, int64_t& out, int64_t min, int64_t max);
  // Integers are accepted too (`step_timeout_s = 30`). `min_exclusive` rejects `min` itself.
  bool get_double(std::string_view key, double& out, double min, bool min_exclusive);
  bool get_string_array(std::string_view key, std::vector<std::string>& out);
  // The raw node (nullptr when absent), for keys with their own rules; the key counts as known.
  const toml::node* get_node(std::string_view key);
  // Marks a key as known without reading it (tables read by another reader).
  void allow(std::string_view key);
  bool has(std::string_view key) const;

  // "PATH:LINE: 'PREFIXKEY' PROBLEM", with the line of `at` (an element of the key's array, say) or else of the
  // key's value; without LINE when neither is known.
  [[noreturn]] void fail(std::string_view key, const std::string& problem, const toml::node* at = nullptr) const;
  // Reports the keys (in file order) no getter asked for, each with the closest known key as a suggestion: the
  // first one thrown, or every one recorded while a ConfigProblems collects.
  void finish() const;

  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }

 private:
  // A getter's problem: thrown, or recorded (returning false) while a ConfigProblems collects.
  bool reject(std::string_view key, const std::string& problem) const;
  std::string message(std::string_view key, const std::string& problem, const toml::node* at) const;
  int64_t line(std::string_view key, const toml::node* at) const;
  const toml::table& table_;
  std::string source_;
  std::string prefix_;
  std::set<std::string, std::less<>> known_;
};

// "PATH:LINE: " (or "PATH: " when the node has no position).
std::string where(const std::string& source, const toml::node* node);

// The closest of `candidates` to `word` when it is close enough to be a likely typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

// ---- Value checks shared by files and flags. Each returns std::nullopt when the value is good, else the problem
// ---- in words, to follow the key's name: "must be ..., got \"x\"".

// "HOST:PORT" with a non-empty host (a name, an IPv4 address, or an IPv6 address in brackets) and a port in
// 1..65535.
std::optional<std::string> check_peer_address(const std::string& value);
// Petals' multiaddress of a peer (/ip4/HOST/tcp/PORT, /ip6/..., /dns/..., /dns4/..., /dns6/..., optionally ending in
// /p2p/ID) as "HOST:PORT" ("[HOST]:PORT" for IPv6); nullopt when `value` is not one.
std::optional<std::string> host_port_of_multiaddr(const std::string& value);
// "FIRST:LAST", integers with 0 <= FIRST < LAST; on success `first` and `last` are set.
std::optional<std::string> parse_block_range(const std::string& value, int64_t& first, int64_t& last);
// "auto", f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K.
std::optional<std::string> check_dtype(const std::string& value);
// The KV caches' dtype: "f32" or "f16".
std::optional<std::string> check_kv_cache_dtype(const std::string& value);
// A swarm id: empty (derived from the model) or letters, digits, '_' and '-'.
std::optional<std::string> check_swarm_id(const std::string& value);
// "cpu", "cuda" or "cuda:N".
std::optional<std::string> check_device(const std::string& value);
// "auto", "eval" or a non-negative number (requests per second).
std::optional<std::string> check_throughput(const std::string& value);

// ---- Writing a resolved configuration back as TOML (keys in the order given, values always explicit).
std::string toml_quote(std::string_view s);
// Shortest text that reads back as the same double, always with a '.' or an exponent.
std::string toml_double(double v);
std::string toml_string_array(const std::vector<std::string>& values);

}  // namespace corolla
