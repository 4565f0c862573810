#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace corolla::sim {
namespace {

using json = nlohmann::ordered_json;

json percentiles(const std::vector<double>& v) {
  json j;
  j["count"] = v.size();
  j["p50"] = percentile(v, 50);
  j["p90"] = percentile(v, 90);
  j["p99"] = percentile(v, 99);
  j["max"] = percentile(v, 100);
  double sum = 0;
  for (double x : v) sum += x;
  j["mean"] = v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  return j;
}

// What the report derives from the sessions.
struct session_figures {
  std::vector<double> ttft, step_latency, duration, steps_per_s, tokens_per_s, recovery;
  size_t completed = 0, failed = 0, unfinished = 0, with_failover = 0, failovers = 0;
};

session_figures figures_of(const sim_results& r) {
  session_figures f;
  for (const auto& s : r.sessions) {
    if (s.done_s < 0)
      ++f.unfinished;
    else if (s.ok)
      ++f.completed;
    else
      ++f.failed;
    if (!s.training && s.first_token_s >= 0) f.ttft.push_back(s.first_token_s - s.arrival_s);
    if (!s.training)
      for (size_t i = 1; i < s.token_s.size(); ++i) f.step_latency.push_back(s.token_s[i] - s.token_s[i - 1]);
    if (s.ok && !s.training) {
      f.duration.push_back(s.done_s - s.arrival_s);
      f.steps_per_s.push_back(s.steps_per_s());
      const double span = s.done_s - s.arrival_s;
      f.tokens_per_s.push_back(span > 0 ? static_cast<double>(s.token_s.size()) / span : 0);
    }
    if (!s.recovery_s.empty()) ++f.with_failover;
    f.failovers += s.recovery_s.size();
    f.recovery.insert(f.recovery.end(), s.recovery_s.begin(), s.recovery_s.end());
  }
  return f;
}

// Tokens per second of the whole swarm between consecutive samples.
std::vector<double> swarm_tokens_per_s(const sim_results& r) {
  std::vector<double> out;
  for (size_t i = 0; i < r.samples.size(); ++i) {
    if (i == 0) {
      out.push_back(0);
      continue;
    }
    const double dt = r.samples[i].t_s - r.samples[i - 1].t_s;
    out.push_back(dt > 0 ? static_cast<double>(r.samples[i].tokens_total - r.samples[i - 1].tokens_total) / dt : 0);
  }
  return out;
}

std::vector<double> min_block_servers(const sim_results& r) {
  std::vector<double> out;
  for (const auto& s : r.samples)
    out.push_back(s.block_servers.empty()
                      ? 0.0
                      : static_cast<double>(*std::min_element(s.block_servers.begin(), s.block_servers.end())));
  return out;
}

// --- SVG -----------------------------------------------------------------------------------------------------------

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// An axis label a person reads at a glance: 21010 -> "21k", 1.576e+04 -> "15.8k", 2.5e6 -> "2.5M".
std::string tick_label(double v) {
  const double a = std::fabs(v);
  if (a < 1e4) return num(v);
  char b[32];
  if (a < 1e6)
    std::snprintf(b, sizeof b, "%.3gk", v / 1e3);
  else if (a < 1e9)
    std::snprintf(b, sizeof b, "%.3gM", v / 1e6);
  else
    std::snprintf(b, sizeof b, "%.3gG", v / 1e9);
  return b;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

struct series {
  std::string name;
  std::vector<double> y;
  const char* color;
};

// A line chart of series over x, axes labelled, with min/max ticks.
std::string line_chart(const std::string& title, const std::vector<double>& x, const std::vector<series>& ys,
                       const std::string& xlabel, const std::string& ylabel) {
  const double w = 640, h = 240, l = 60, rgt = 20, top = 30, bot = 40;
  double x0 = x.empty() ? 0 : x.front(), x1 = x.empty() ? 1 : x.back();
  if (x1 <= x0) x1 = x0 + 1;
  double y1 = 0;
  for (const auto& s : ys)
    for (double v : s.y) y1 = std::max(y1, v);
  if (y1 <= 0) y1 = 1;
  y1 *= 1.05;
  auto px = [&](double v) { return l + (v - x0) / (x1 - x0) * (w - l - rgt); };
  auto py = [&](double v) { return h - bot - v / y1 * (h - top - bot); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "' viewBox='0 0 " << w << ' ' << h
    << "'>\n<text x='" << l << "' y='18' font-size='14' font-weight='bold'>" << esc(title) << "</text>\n";
  o << "<line x1='" << l << "' y1='" << h - bot << "' x2='" << w - rgt << "' y2='" << h - bot
    << "' stroke='#333'/><line x1='" << l << "' y1='" << top << "' x2='" << l << "' y2='" << h - bot
    << "' stroke='#333'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = y1 * i / 4;
    o << "<text x='" << l - 6 << "' y='" << py(v) + 4 << "' font-size='10' text-anchor='end'>" << tick_label(v)
      << "</text><line x1='" << l << "' y1='" << py(v) << "' x2='" << w - rgt << "' y2='" << py(v)
      << "' stroke='#ddd'/>\n";
    const double xv = x0 + (x1 - x0) * i / 4;
    o << "<text x='" << px(xv) << "' y='" << h - bot + 14 << "' font-size='10' text-anchor='middle'>" << tick_label(xv)
      << "</text>\n";
  }
  o << "<text x='" << (l + w - rgt) / 2 << "' y='" << h - 6 << "' font-size='11' text-anchor='middle'>" << esc(xlabel)
    << "</text><text x='12' y='" << (top + h - bot) / 2
    << "' font-size='11' text-anchor='middle' transform='rotate(-90 12 " << (top + h - bot) / 2 << ")'>" << esc(ylabel)
    << "</text>\n";
  double lx = l + 10;
  for (const auto& s : ys) {
    o << "<polyline fill='none' stroke='" << s.color << "' stroke-width='1.5' points='";
    for (size_t i = 0; i < s.y.size() && i < x.size(); ++i) o << num(px(x[i])) << ',' << num(py(s.y[i])) << ' ';
    o << "'/>\n<text x='" << lx << "' y='" << top + 12 << "' font-size='11' fill='" << s.color << "'>" << esc(s.name)
      << "</text>\n";
    lx += 14 + 7 * static_cast<double>(s.name.size());
  }
  o << "</svg>\n";
  return o.str();
}

// Blocks (rows) over time (columns): how many online servers serve each block, darker for more, red for none.
std::string coverage_map(const sim_results& r) {
  const double w = 640, h = 240, l = 60, top = 30, bot = 40;
  const size_t cols = r.samples.size(), rows = static_cast<size_t>(std::max<int64_t>(r.blocks, 1));
  int64_t most = 1;
  for (const auto& s : r.samples)
    for (auto v : s.block_servers) most = std::max(most, v);
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "' viewBox='0 0 " << w << ' ' << h
    << "'>\n<text x='" << l << "' y='18' font-size='14' font-weight='bold'>Servers per block over time (red: "
    << "no server)</text>\n";
  const double cw = (w - l - 20) / static_cast<double>(std::max<size_t>(cols, 1));
  const double ch = (h - top - bot) / static_cast<double>(rows);
  for (size_t c = 0; c < cols; ++c)
    for (size_t b = 0; b < rows && b < r.samples[c].block_servers.size(); ++b) {
      const int64_t v = r.samples[c].block_servers[b];
      std::string fill = "#d62728";
      if (v > 0) {
        const int shade = 230 - static_cast<int>(180.0 * static_cast<double>(v) / static_cast<double>(most));
        char b2[16];
        std::snprintf(b2, sizeof b2, "#%02x%02xff", shade, shade);
        fill = b2;
      }
      o << "<rect x='" << num(l + static_cast<double>(c) * cw) << "' y='" << num(top + static_cast<double>(b) * ch)
        << "' width='" << num(cw + 0.3) << "' height='" << num(ch + 0.3) << "' fill='" << fill << "'/>\n";
    }
  o << "<text x='" << l - 6 << "' y='" << top + 10 << "' font-size='10' text-anchor='end'>block 0</text>"
    << "<text x='" << l - 6 << "' y='" << h - bot << "' font-size='10' text-anchor='end'>" << rows - 1 << "</text>"
    << "<text x='" << (w + l) / 2 << "' y='" << h - 6 << "' font-size='11' text-anchor='middle'>virtual time (s), 0 .. "
    << num(r.duration_s) << "; darkest = " << most << " servers</text>\n</svg>\n";
  return o.str();
}

// Per session: its inference steps/s, as bars.
std::string session_bars(const sim_results& r) {
  std::vector<double> x, y;
  for (const auto& s : r.sessions) {
    if (s.training) continue;
    x.push_back(static_cast<double>(s.id));
    y.push_back(s.ok ? s.steps_per_s() : 0);
  }
  return line_chart("Inference steps/s of each session (0: failed)", x, {{"steps/s", y, "#2ca02c"}}, "session",
                    "steps/s");
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : std::min(v.size() - 1, static_cast<size_t>(rank) - 1);
  return v[i];
}

std::string report_json(const sim_results& r) {
  const session_figures f = figures_of(r);
  json j;
  j["scenario"] = r.scenario;
  j["seed"] = r.seed;
  j["duration_s"] = r.duration_s;
  j["blocks"] = r.blocks;
  json& s = j["sessions"];
  s["count"] = r.sessions.size();
  s["completed"] = f.completed;
  s["failed"] = f.failed;
  s["unfinished"] = f.unfinished;
  s["time_to_first_token_s"] = percentiles(f.ttft);
  s["step_latency_s"] = percentiles(f.step_latency);
  s["duration_s"] = percentiles(f.duration);
  s["inference_steps_per_s"] = percentiles(f.steps_per_s);
  s["tokens_per_s"] = percentiles(f.tokens_per_s);
  json& fo = j["failovers"];
  fo["count"] = f.failovers;
  fo["sessions_with_failover"] = f.with_failover;
  fo["recovery_s"] = percentiles(f.recovery);
  json& sv = j["servers"];
  int64_t crashed = 0, left = 0, moves = 0;
  json list = json::array();
  for (const auto& x : r.servers) {
    crashed += x.fate == "crashed";
    left += x.fate == "left";
    moves += x.moves;
    json e;
    e["address"] = x.address;
    e["class"] = x.server_class;
    e["region"] = x.region;
    e["swarm"] = x.swarm;
    e["tflops"] = x.tflops;
    e["memory_bandwidth_gbs"] = x.bandwidth_gbs;
    e["num_blocks"] = x.num_blocks;
    e["inference_rps"] = x.inference_rps;
    e["forward_rps"] = x.forward_rps;
    e["throughput"] = x.throughput;
    e["span"] = {x.first_block, x.last_block};
    e["start_s"] = x.start_s;
    e["end_s"] = x.end_s;
    e["fate"] = x.fate;
    e["moves"] = x.moves;
    list.push_back(std::move(e));
  }
  sv["count"] = r.servers.size();
  sv["crashed"] = crashed;
  sv["left"] = left;
  sv["moves"] = moves;
  sv["list"] = std::move(list);
  json& cov = j["coverage"];
  json t = json::array(), online = json::array(), minb = json::array(), servers = json::array(), cap = json::array();
  const auto mins = min_block_servers(r);
  for (size_t i = 0; i < r.samples.size(); ++i) {
    t.push_back(r.samples[i].t_s);
    online.push_back(r.samples[i].servers_online);
    minb.push_back(mins[i]);
    servers.push_back(r.samples[i].block_servers);
    cap.push_back(r.samples[i].block_capacity);
  }
  cov["t_s"] = t;
  cov["servers_online"] = online;
  cov["min_servers_per_block"] = minb;
  cov["block_servers"] = servers;
  cov["block_capacity_tokens_per_s"] = cap;
  j["swarm_tokens_per_s"] = swarm_tokens_per_s(r);
  json& tr = j["traffic"];
  tr["messages"] = r.traffic.messages;
  tr["bytes"] = r.traffic.bytes;
  tr["lost"] = r.traffic.lost;
  tr["signature_checks"] = r.traffic.signature_checks;
  tr["signature_check_s"] = r.traffic.signature_check_s;
  auto dht = r.traffic.messages_per_minute.find("dht");
  tr["dht_messages_per_minute"] = dht == r.traffic.messages_per_minute.end() ? std::vector<uint64_t>{} : dht->second;
  json per = json::array();
  for (const auto& x : r.sessions) {
    json e;
    e["id"] = x.id;
    e["client"] = x.client;
    e["training"] = x.training;
    e["prompt_tokens"] = x.prompt_tokens;
    e["new_tokens"] = x.new_tokens;
    e["arrival_s"] = x.arrival_s;
    e["time_to_first_token_s"] = x.first_token_s >= 0 ? x.first_token_s - x.arrival_s : -1.0;
    e["tokens"] = x.token_s.size();
    e["inference_steps_per_s"] = x.steps_per_s();
    e["duration_s"] = x.done_s >= 0 ? x.done_s - x.arrival_s : -1.0;
    e["open_attempts"] = x.open_attempts;
    e["failovers"] = x.recovery_s.size();
    e["recovery_s"] = x.recovery_s;
    e["failures"] = x.failures;
    e["ok"] = x.ok;
    e["error"] = x.error;
    per.push_back(std::move(e));
  }
  j["session_list"] = std::move(per);
  json broken = json::array();
  for (const auto& v : r.violations)
    broken.push_back({{"invariant", v.invariant}, {"t_s", v.t_s}, {"actors", v.actors}, {"what", v.what}});
  j["invariants_broken"] = std::move(broken);
  j["log_lines"] = r.log_lines;
  return j.dump(1) + "\n";
}

std::string run_cost_json(const sim_results& r) {
  json j;
  j["scenario"] = r.scenario;
  j["seed"] = r.seed;
  j["virtual_s"] = r.duration_s;
  j["wall_s"] = r.cost.wall_s;
  j["events"] = r.cost.events;
  j["events_per_s"] = r.cost.events_per_s;
  j["peak_rss_mb"] = r.cost.peak_rss_mb;
  j["events_by_actor"] = r.cost.events_by_actor;
  j["servers"] = r.servers.size();
  j["sessions"] = r.sessions.size();
  return j.dump(1) + "\n";
}

std::string report_html(const sim_results& r) {
  const session_figures f = figures_of(r);
  std::vector<double> t;
  std::vector<double> online, capacity_min;
  for (const auto& s : r.samples) {
    t.push_back(s.t_s);
    online.push_back(static_cast<double>(s.servers_online));
    capacity_min.push_back(
        s.block_capacity.empty() ? 0 : *std::min_element(s.block_capacity.begin(), s.block_capacity.end()));
  }
  std::vector<double> dht_x, dht_y;
  if (auto it = r.traffic.messages_per_minute.find("dht"); it != r.traffic.messages_per_minute.end())
    for (size_t i = 0; i < it->second.size(); ++i) {
      dht_x.push_back(static_cast<double>(i));
      dht_y.push_back(static_cast<double>(it->second[i]));
    }
  std::vector<double> lat_x, lat_y;  // the step-latency distribution as a CDF
  {
    auto v = f.step_latency;
    std::sort(v.begin(), v.end());
    const size_t n = v.size(), points = std::min<size_t>(n, 200);
    for (size_t i = 0; i < points; ++i) {
      const size_t k = (i * (n - 1)) / std::max<size_t>(points - 1, 1);
      lat_x.push_back(100.0 * static_cast<double>(k + 1) / static_cast<double>(n));
      lat_y.push_back(v[k]);
    }
  }
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>Corolla simulation: " << esc(r.scenario)
    << "</title>\n<style>body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}"
    << "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
    << "th{background:#f4f4f4}svg{display:block;margin:1em 0}</style></head><body>\n";
  o << "<h1>Simulation: " << esc(r.scenario) << "</h1>\n<p>seed " << r.seed << ", " << num(r.duration_s)
    << " s of virtual time, " << r.blocks << " blocks, " << r.servers.size() << " servers, " << r.sessions.size()
    << " sessions; " << r.log_lines << " events logged.</p>\n";
  o << "<h2>Invariants</h2>";
  if (r.violations.empty())
    o << "<p>Every invariant held.</p>\n";
  else {
    o << "<table><tr><th>invariant</th><th>at (s)</th><th>actors</th><th>what</th></tr>";
    for (const auto& v : r.violations)
      o << "<tr><th>" << esc(v.invariant) << "</th><td>" << num(v.t_s) << "</td><td>" << esc(v.actors)
        << "</td><td style='text-align:left'>" << esc(v.what) << "</td></tr>";
    o << "</table>\n";
  }
  o << "<h2>Sessions</h2><table><tr><th>completed</th><th>failed</th><th>unfinished</th><th>failovers</th>"
    << "<th>sessions with a failover</th></tr><tr><td>" << f.completed << "</td><td>" << f.failed << "</td><td>"
    << f.unfinished << "</td><td>" << f.failovers << "</td><td>" << f.with_failover << "</td></tr></table>\n";
  o << "<table><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>";
  auto row = [&](const char* name, const std::vector<double>& v) {
    o << "<tr><th>" << name << "</th><td>" << num(percentile(v, 50)) << "</td><td>" << num(percentile(v, 90))
      << "</td><td>" << num(percentile(v, 99)) << "</td><td>" << num(percentile(v, 100)) << "</td></tr>";
  };
  row("time to first token (s)", f.ttft);
  row("step latency (s)", f.step_latency);
  row("session duration (s)", f.duration);
  row("inference steps/s per session", f.steps_per_s);
  row("tokens/s per session", f.tokens_per_s);
  row("failover recovery (s)", f.recovery);
  o << "</table>\n";
  o << coverage_map(r);
  o << line_chart(
      "Servers online and the weakest block", t,
      {{"servers online", online, "#1f77b4"}, {"servers on the weakest block", min_block_servers(r), "#d62728"}},
      "virtual time (s)", "servers");
  o << line_chart("Capacity of the weakest block (summed inference rates)", t, {{"tokens/s", capacity_min, "#9467bd"}},
                  "virtual time (s)", "tokens/s");
  o << line_chart("Tokens generated per second by the whole swarm", t, {{"tokens/s", swarm_tokens_per_s(r), "#ff7f0e"}},
                  "virtual time (s)", "tokens/s");
  o << line_chart("Step latency, cumulative", lat_x, {{"latency (s)", lat_y, "#17becf"}}, "percent of steps", "s");
  o << session_bars(r);
  o << line_chart("DHT messages per minute", dht_x, {{"messages", dht_y, "#8c564b"}}, "minute", "messages");
  o << "<h2>Traffic</h2><table><tr><th>kind</th><th>messages</th><th>bytes</th><th>lost</th></tr>";
  for (const auto& [kind, n] : r.traffic.messages) {
    auto bytes = r.traffic.bytes.count(kind) ? r.traffic.bytes.at(kind) : 0;
    auto lost = r.traffic.lost.count(kind) ? r.traffic.lost.at(kind) : 0;
    o << "<tr><th>" << esc(kind) << "</th><td>" << n << "</td><td>" << bytes << "</td><td>" << lost << "</td></tr>";
  }
  o << "</table>\n<p>Signatures of DHT records checked by the nodes that received them: " << r.traffic.signature_checks
    << " (" << r.traffic.signature_check_s << " s of CPU time in all).</p>";
  o << "\n<h2>Servers</h2><table><tr><th>address</th><th>class</th><th>region</th><th>blocks</th>"
    << "<th>span</th><th>inference tokens/s</th><th>throughput</th><th>moves</th><th>fate</th><th>at (s)</th></tr>";
  for (const auto& x : r.servers)
    o << "<tr><th>" << esc(x.address) << "</th><td>" << esc(x.server_class) << "</td><td>" << esc(x.region)
      << "</td><td>" << x.num_blocks << "</td><td>" << x.first_block << ".." << x.last_block - 1 << "</td><td>"
      << num(x.inference_rps) << "</td><td>" << num(x.throughput) << "</td><td>" << x.moves << "</td><td>"
      << esc(x.fate) << "</td><td>" << (x.end_s >= 0 ? num(x.end_s) : std::string("-")) << "</td></tr>";
  o << "</table>\n</body></html>\n";
  return o.str();
}

}  // namespace corolla::sim
