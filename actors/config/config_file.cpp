#include "actors/config/config_file.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "kernels/dtype.hpp"
#include "model/bounded_file.hpp"

namespace corolla {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Non-negative decimal integer without sign or spaces; nullopt when it is not one or overflows.
std::optional<int64_t> parse_uint(std::string_view s) {
  if (!all_digits(s)) return std::nullopt;
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string normalized(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Edit distance counting an adjacent transposition as one edit (optimal string alignment).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string int_range_text(int64_t min, int64_t max) {
  if (max == std::numeric_limits<int64_t>::max()) return "an integer >= " + std::to_string(min);
  return "an integer in " + std::to_string(min) + ".." + std::to_string(max);
}

}  // namespace

toml::table parse_config_file(const std::string& path) { return parse_config_text(read_config_file(path), path); }

std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ConfigError(path + ": cannot read the file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot read the file: " + std::strerror(errno));
  try {
    return read_bounded_file(path, kMaxConfigFileBytes, "a configuration file");
  } catch (const std::runtime_error& e) {
    throw ConfigError(e.what());
  }
}

toml::table parse_config_text(std::string_view text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& begin = e.source().begin;
    std::string pos = path;
    if (begin.line > 0) pos += ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
    throw ConfigError(pos + ": invalid TOML: " + std::string(e.description()));
  }
}

std::string describe_value(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return toml_quote(node.as_string()->get());
    case toml::node_type::integer: return std::to_string(node.as_integer()->get());
    case toml::node_type::floating_point: return toml_double(node.as_floating_point()->get());
    case toml::node_type::boolean: return node.as_boolean()->get() ? "true" : "false";
    case toml::node_type::table: return "a table";
    default: {
      std::ostringstream os;
      if (const auto* a = node.as_array()) {
        if (a->is_array_of_tables()) return "an array of tables";
        os << *a;
      } else if (const auto* d = node.as_date()) {
        os << *d;
      } else if (const auto* t = node.as_time()) {
        os << *t;
      } else if (const auto* dt = node.as_date_time()) {
        os << *dt;
      }
      std::string s = os.str();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return s;
    }
  }
}

std::string where(const std::string& source, const toml::node* node) {
  if (node && node->source().begin.line > 0) return source + ":" + std::to_string(node->source().begin.line) + ": ";
  return source + ": ";
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string w = normalized(word);
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = edit_distance(w, normalized(c));
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const size_t allowed = w.size() <= 3 ? 1 : w.size() <= 7 ? 2 : 3;
  return best_d <= allowed ? best : "";
}

namespace {
thread_local ConfigProblems* current_problems = nullptr;
}  // namespace

ConfigProblems::ConfigProblems() : outer_(current_problems) { current_problems = this; }
ConfigProblems::~ConfigProblems() { current_problems = outer_; }
ConfigProblems* ConfigProblems::current() { return current_problems; }

void ConfigProblems::check() const {
  if (problems_.empty()) return;
  auto in_order = problems_;
  std::stable_sort(in_order.begin(), in_order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string all;
  for (const auto& [line, m] : in_order) all += (all.empty() ? "" : "\n") + m;
  throw ConfigError(all);
}

TableReader::TableReader(const toml::table& table, std::string source, std::string prefix)
    : table_(table), source_(std::move(source)), prefix_(std::move(prefix)) {}

const toml::node* TableReader::get_node(std::string_view key) {
  known_.emplace(key);
  return table_.get(key);
}

void TableReader::allow(std::string_view key) { known_.emplace(key); }

bool TableReader::has(std::string_view key) const { return table_.contains(key); }

std::string TableReader::message(std::string_view key, const std::string& problem, const toml::node* at) const {
  if (!at || at->source().begin.line == 0) at = table_.get(key);
  return where(source_, at) + "'" + prefix_ + std::string(key) + "' " + problem;
}

int64_t TableReader::line(std::string_view key, const toml::node* at) const {
  if (!at || at->source().begin.line == 0) at = table_.get(key);
  return at ? static_cast<int64_t>(at->source().begin.line) : 0;
}

void TableReader::fail(std::string_view key, const std::string& problem, const toml::node* at) const {
  if (ConfigProblems* problems = ConfigProblems::current()) {
    problems->add(message(key, problem, at), line(key, at));
    problems->check();
  }
  throw ConfigError(message(key, problem, at));
}

bool TableReader::reject(std::string_view key, const std::string& problem) const {
  ConfigProblems* problems = ConfigProblems::current();
  if (!problems) throw ConfigError(message(key, problem, nullptr));
  problems->add(message(key, problem, nullptr), line(key, nullptr));
  return false;
}

bool TableReader::get_string(std::string_view key, std::string& out) {
  const toml::node* n = get_node(key);
  if (!n) return false;
  if (!n->is_string()) return reject(key, "must be a string, got " + describe_value(*n));
  out = n->as_string()->get();
  return true;
}

bool TableReader::get_bool(std::string_view key, bool& out) {
  const toml::node* n = get_node(key);
  if (!n) return false;
  if (!n->is_boolean()) return reject(key, "must be true or false, got " + describe_value(*n));
  out = n->as_boolean()->get();
  return true;
}

bool TableReader::get_int(std::string_view key, int64_t& out, int64_t min, int64_t max) {
  const toml::node* n = get_node(key);
  if (!n) return false;
  if (!n->is_integer() || n->as_integer()->get() < min || n->as_integer()->get() > max)
    return reject(key, "must be " + int_range_text(min, max) + ", got " + describe_value(*n));
  out = n->as_integer()->get();
  return true;
}

bool TableReader::get_double(std::string_view key, double& out, double min, bool min_exclusive) {
  const toml::node* n = get_node(key);
  if (!n) return false;
  const std::string min_text = min == std::floor(min) ? std::to_string(static_cast<int64_t>(min)) : toml_double(min);
  const std::string want = std::string("must be a number ") + (min_exclusive ? "> " : ">= ") + min_text;
  double v = 0;
  if (n->is_integer())
    v = static_cast<double>(n->as_integer()->get());
  else if (n->is_floating_point())
    v = n->as_floating_point()->get();
  else
    return reject(key, want + ", got " + describe_value(*n));
  if (!std::isfinite(v) || v < min || (min_exclusive && v == min))
    return reject(key, want + ", got " + describe_value(*n));
  out = v;
  return true;
}

bool TableReader::get_string_array(std::string_view key, std::vector<std::string>& out) {
  const toml::node* n = get_node(key);
  if (!n) return false;
  const toml::array* a = n->as_array();
  if (!a || (!a->empty() && !a->is_homogeneous(toml::node_type::string)))
    return reject(key, "must be an array of strings, got " + describe_value(*n));
  std::vector<std::string> values;
  for (const auto& e : *a) values.push_back(e.as_string()->get());
  out = std::move(values);
  return true;
}

void TableReader::finish() const {
  std::vector<std::string> known(known_.begin(), known_.end());
  std::vector<const toml::key*> unknown;
  for (const auto& [k, v] : table_)
    if (!known_.count(k.str())) unknown.push_back(&k);
  std::stable_sort(unknown.begin(), unknown.end(), [](const toml::key* a, const toml::key* b) {
    return a->source().begin.line < b->source().begin.line;
  });
  for (const toml::key* k : unknown) {
    std::string msg = source_ + ":";
    if (k->source().begin.line > 0) msg += std::to_string(k->source().begin.line) + ":";
    msg += " unknown key '" + prefix_ + std::string(k->str()) + "'";
    if (const std::string guess = closest_match(k->str(), known); !guess.empty())
      msg += " (did you mean '" + prefix_ + guess + "'?)";
    ConfigProblems* problems = ConfigProblems::current();
    if (!problems) throw ConfigError(msg);
    problems->add(std::move(msg), static_cast<int64_t>(k->source().begin.line));
  }
}

std::optional<std::string> host_port_of_multiaddr(const std::string& value) {
  std::vector<std::string> parts;
  std::stringstream ss(value);
  for (std::string part; std::getline(ss, part, '/');) parts.push_back(part);
  // "", protocol, host, "tcp", port [, "p2p", id]
  if (parts.size() != 5 && parts.size() != 7) return std::nullopt;
  if (!parts[0].empty() || parts[3] != "tcp" || parts[2].empty()) return std::nullopt;
  if (parts.size() == 7 && (parts[5] != "p2p" || parts[6].empty())) return std::nullopt;
  const auto port = parse_uint(parts[4]);
  if (!port || *port < 1 || *port > 65535) return std::nullopt;
  const std::string& proto = parts[1];
  if (proto == "ip6") return "[" + parts[2] + "]:" + parts[4];
  if (proto == "ip4" || proto == "dns" || proto == "dns4" || proto == "dns6") return parts[2] + ":" + parts[4];
  return std::nullopt;
}

std::optional<std::string> check_peer_address(const std::string& value) {
  const std::string want = "must hold \"HOST:PORT\" addresses (e.g. \"127.0.0.1:31331\"), got " + toml_quote(value);
  if (value.empty()) return want;
  if (std::any_of(value.begin(), value.end(), [](unsigned char c) { return std::isspace(c) || std::iscntrl(c); }))
    return want + ": it contains spaces";
  if (value.front() == '/') return want + ": Corolla peers are HOST:PORT, not multiaddresses";
  std::string_view host, port;
  if (value.front() == '[') {
    const size_t close = value.find(']');
    if (close == std::string::npos) return want + ": no ']' closes the IPv6 address";
    host = std::string_view(value).substr(1, close - 1);
    if (close + 1 >= value.size() || value[close + 1] != ':') return want + ": no port";
    port = std::string_view(value).substr(close + 2);
  } else {
    const size_t colon = value.rfind(':');
    if (colon == std::string::npos) return want + ": no port";
    if (value.find(':') != colon) return want + ": write IPv6 addresses in brackets, e.g. \"[::1]:31331\"";
    host = std::string_view(value).substr(0, colon);
    port = std::string_view(value).substr(colon + 1);
  }
  if (host.empty()) return want + ": no host";
  if (port.empty()) return want + ": no port";
  const auto p = parse_uint(port);
  if (!p || *p < 1 || *p > 65535) return want + ": the port must be in 1..65535";
  return std::nullopt;
}

std::optional<std::string> parse_block_range(const std::string& value, int64_t& first, int64_t& last) {
  const std::string want = "must be \"FIRST:LAST\" with 0 <= FIRST < LAST (e.g. \"10:20\"), got " + toml_quote(value);
  const size_t colon = value.find(':');
  if (colon == std::string::npos) return want;
  const auto a = parse_uint(std::string_view(value).substr(0, colon));
  const auto b = parse_uint(std::string_view(value).substr(colon + 1));
  if (!a || !b || *a > std::numeric_limits<int32_t>::max() || *b > std::numeric_limits<int32_t>::max()) return want;
  if (*a >= *b) return want + ": FIRST must be below LAST";
  first = *a;
  last = *b;
  return std::nullopt;
}

std::optional<std::string> check_swarm_id(const std::string& value) {
  for (char ch : value)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-')
      return "must hold only letters, digits, '_' and '-', got " + toml_quote(value);
  return std::nullopt;
}

std::optional<std::string> check_dtype(const std::string& value) {
  if (value == "auto") return std::nullopt;
  for (DType t : weight_dtypes())
    if (value == dtype_name(t)) return std::nullopt;
  return "must be one of auto, " + weight_dtype_list() + ", got " + toml_quote(value);
}

std::optional<std::string> check_kv_cache_dtype(const std::string& value) {
  if (value == "f32" || value == "f16") return std::nullopt;
  return "must be f32 or f16, got " + toml_quote(value);
}

std::optional<std::string> check_device(const std::string& value) {
  if (value == "cpu" || value == "cuda") return std::nullopt;
  if (value.rfind("cuda:", 0) == 0) {
    const auto n = parse_uint(std::string_view(value).substr(5));
    if (n && *n < 1024) return std::nullopt;
  }
  return "must be \"cpu\", \"cuda\" or \"cuda:N\", got " + toml_quote(value);
}

std::optional<std::string> check_throughput(const std::string& value) {
  if (value == "auto" || value == "eval") return std::nullopt;
  const std::string want =
      "must be \"auto\", \"eval\" or a number >= 0 (requests per second), got " + toml_quote(value);
  double v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || !std::isfinite(v) || v < 0)
    return want;
  return std::nullopt;
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string toml_double(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // "n": inf and nan are TOML floats as they are
  return s;
}

std::string toml_string_array(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + toml_quote(values[i]);
  return out + "]";
}

}  // namespace corolla
