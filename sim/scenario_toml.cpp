#include "sim/scenario_toml.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

namespace corolla::sim {
namespace {

// Shortest text that reads back as the same double (17 significant digits at most), always with a point or an
// exponent so that TOML keeps it a float.
std::string number(double v) {
  char b[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(b, sizeof b, "%.*g", digits, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  std::string s = b;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string: JSON's escaping is a subset TOML reads.
std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

std::string quoted_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + quoted(v[i]);
  return out + "]";
}

}  // namespace

std::string scenario_toml(const scenario& sc) {
  std::ostringstream o;
  o << "name = " << quoted(sc.name) << "\n"
    << "seed = " << sc.seed << "\n"
    << "duration_s = " << number(sc.duration_s) << "\n"
    << "announce_period_s = " << number(sc.announce_period_s) << "\n"
    << "mean_balance_check_s = " << number(sc.mean_balance_check_s) << "\n"
    << "balance_quality = " << number(sc.balance_quality) << "\n"
    << "log_steps = " << (sc.log_steps ? "true" : "false") << "\n"
    << "check_outputs = " << (sc.check_outputs ? "true" : "false") << "\n";
  const auto& m = sc.model;
  o << "\n[model]\nblocks = " << m.blocks << "\nhidden_size = " << m.hidden_size
    << "\nintermediate_size = " << m.intermediate_size << "\nheads = " << m.heads << "\nkv_heads = " << m.kv_heads
    << "\nvocab_size = " << m.vocab_size << "\nexperts = " << m.experts
    << "\nexperts_per_token = " << m.experts_per_token << "\ndtype = " << quoted(dtype_name(m.dtype))
    << "\nswarms = " << m.swarms << "\n";
  const auto& n = sc.network;
  std::vector<std::string> regions;
  for (const auto& r : n.regions) regions.push_back(r.name);
  o << "\n[network]\nregions = " << quoted_list(regions) << "\nlocal_ms = " << number(n.local_ms)
    << "\nbandwidth_mbps = " << number(n.bandwidth_mbps) << "\nloss = " << number(n.loss)
    << "\nconnection_timeout_s = " << number(n.connection_timeout_s) << "\nclock_skew_s = " << number(n.clock_skew_s)
    << "\nsignature_check_us = " << number(n.signature_check_us) << "\n";
  for (const auto& l : n.latencies)
    o << "[[network.latency]]\nbetween = " << quoted_list({l.a, l.b}) << "\none_way_ms = " << number(l.one_way_ms)
      << "\n";
  for (const auto& c : sc.servers)
    o << "\n[[servers]]\nname = " << quoted(c.name) << "\ncount = " << c.count << "\nregion = " << quoted(c.region)
      << "\ntflops = " << number(c.tflops) << "\nmemory_bandwidth_gbs = " << number(c.memory_bandwidth_gbs)
      << "\nop_overhead_us = " << number(c.op_overhead_us) << "\nefficiency = " << number(c.efficiency)
      << "\njitter = " << number(c.jitter) << "\nmemory_gb = " << number(c.memory_gb)
      << "\nnum_blocks = " << c.num_blocks << "\ncache_tokens = " << c.cache_tokens
      << "\nmax_batch_tokens = " << c.max_batch_tokens << "\nbandwidth_mbps = " << number(c.bandwidth_mbps)
      << "\nstart_s = " << number(c.start_s) << "\nstart_spread_s = " << number(c.start_spread_s)
      << "\nwrong_outputs = " << number(c.wrong_outputs) << "\n";
  const auto& w = sc.workload;
  o << "\n[workload]\nclients = " << w.clients << "\nregions = " << quoted_list(w.regions)
    << "\nsessions = " << w.sessions << "\narrival_rate_per_s = " << number(w.arrival_rate_per_s)
    << "\nstart_s = " << number(w.start_s) << "\nprompt_tokens = " << w.prompt_tokens
    << "\nprompt_tokens_max = " << w.prompt_tokens_max << "\nnew_tokens = " << w.new_tokens
    << "\nnew_tokens_max = " << w.new_tokens_max << "\nmax_length = " << w.max_length << "\nmode = " << quoted(w.mode)
    << "\nrequest_timeout_s = " << number(w.request_timeout_s)
    << "\nrecovery_timeout_s = " << number(w.recovery_timeout_s) << "\nspot_check_every = " << w.spot_check_every
    << "\ntraining_sessions = " << w.training_sessions << "\ntraining_steps = " << w.training_steps
    << "\ntraining_batch = " << w.training_batch << "\ntraining_tokens = " << w.training_tokens
    << "\ntraining_max_batch_tokens = " << w.training_max_batch_tokens << "\n";
  const auto& c = sc.churn;
  o << "\n[churn]\ncrash_fraction = " << number(c.crash_fraction) << "\nleave_fraction = " << number(c.leave_fraction)
    << "\nfreeze_fraction = " << number(c.freeze_fraction) << "\nfreeze_s = " << number(c.freeze_s)
    << "\nstart_s = " << number(c.start_s) << "\nwithin_s = " << number(c.within_s) << "\n";
  for (const auto& e : c.events) {
    o << "[[churn.events]]\nat_s = " << number(e.at_s) << "\nkind = " << quoted(e.kind) << "\n";
    if (e.server >= 0) o << "server = " << e.server << "\n";
    if (!e.region.empty()) o << "region = " << quoted(e.region) << "\n";
    if (e.duration_s > 0) o << "duration_s = " << number(e.duration_s) << "\n";
    if (!e.server_class.empty()) o << "class = " << quoted(e.server_class) << "\n";
    if (e.latency_ms > 0) o << "latency_ms = " << number(e.latency_ms) << "\n";
  }
  const auto& h = sc.hostile;
  o << "\n[hostile]\nimpostors = " << h.impostors << "\nimpostor_start_s = " << number(h.impostor_start_s)
    << "\nimpostor_period_s = " << number(h.impostor_period_s) << "\nforge = " << (h.forge ? "true" : "false")
    << "\nflood_subkeys = " << h.flood_subkeys << "\n";
  return o.str();
}

}  // namespace corolla::sim
