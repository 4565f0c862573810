#include "sim/network.hpp"

#include "actors/dht/signed_record.hpp"

#include <algorithm>
#include <stdexcept>

namespace corolla::sim {

Network::Network(const network_model& model, uint64_t seed) : model_(model), rng_(seed * 0x9E3779B97F4A7C15ull + 17) {
  for (const auto& r : model_.regions) region_names_.push_back(r.name);
  const size_t n = region_names_.size();
  latency_s_.assign(n, std::vector<double>(n, model_.local_ms / 1000.0));
  for (const auto& l : model_.latencies) {
    const auto a = find_region(l.a), b = find_region(l.b);
    if (!a || !b) throw std::invalid_argument("a latency names an unknown region");
    latency_s_[*a][*b] = latency_s_[*b][*a] = l.one_way_ms / 1000.0;
  }
}

std::optional<size_t> Network::find_region(const std::string& name) const {
  for (size_t i = 0; i < region_names_.size(); ++i)
    if (region_names_[i] == name) return i;
  return std::nullopt;
}

node_index Network::add_node(std::string name, const std::string& region, double bandwidth_mbps) {
  const auto r = find_region(region);
  if (!r) throw std::invalid_argument("unknown region '" + region + "'");
  const double mbps = bandwidth_mbps > 0 ? bandwidth_mbps : model_.bandwidth_mbps;
  nodes_.push_back({std::move(name), *r, mbps * 1e6, {}, {}, {}});
  return nodes_.size() - 1;
}

void Network::publish(const std::string& address, node_index node, caf::actor actor, dht_rpc_actor dht) {
  published_[address] = {node, std::move(actor), std::move(dht)};
}

std::optional<Network::endpoint> Network::lookup(const std::string& address) const {
  auto it = published_.find(address);
  if (it == published_.end()) return std::nullopt;
  return it->second;
}

double Network::latency_s(node_index from, node_index to) const {
  if (from == to) return 0;
  double extra = 0;
  if (!extra_latency_s_.empty()) {
    if (auto it = extra_latency_s_.find(from); it != extra_latency_s_.end()) extra += it->second;
    if (auto it = extra_latency_s_.find(to); it != extra_latency_s_.end()) extra += it->second;
  }
  return latency_s_[nodes_[from].region][nodes_[to].region] + extra;
}

void Network::set_extra_latency(node_index n, double seconds) {
  ++faults_;
  if (seconds > 0)
    extra_latency_s_[n] = seconds;
  else
    extra_latency_s_.erase(n);
}

double Network::transfer_s(node_index from, node_index to, uint64_t bytes) const {
  if (from == to) return 0;
  const double bps = std::min(nodes_[from].bandwidth_bps, nodes_[to].bandwidth_bps);
  return 8.0 * static_cast<double>(bytes) / bps;
}

bool Network::reachable(node_index from, node_index to) const {
  if (crashed(from) || crashed(to)) return false;
  if (from == to) return true;
  if (frozen_.count(from) || frozen_.count(to)) return false;
  const bool a = cut_regions_.count(nodes_[from].region) != 0, b = cut_regions_.count(nodes_[to].region) != 0;
  return !(a || b) || nodes_[from].region == nodes_[to].region;
}

uint64_t Network::new_records(node& n, const std::vector<dht_item>& records) {
  uint64_t fresh = 0;
  for (const dht_item& r : records) {
    // A record is known by its subkey and its last 64 bytes (its signature, which Cap'n Proto writes last).
    const std::string_view value(r.value), tail = value.substr(value.size() - std::min<size_t>(value.size(), 64));
    const uint64_t h =
        std::hash<std::string_view>{}(tail) ^ (std::hash<std::string_view>{}(r.subkey) * 0x9e3779b97f4a7c15ull);
    if (n.checked.count(h)) continue;
    if (n.checked.size() >= kCheckedRecordsKept) n.checked.clear();
    n.checked.insert(h);
    ++fresh;
  }
  return fresh;
}

std::optional<caf::timespan> Network::deliver(node_index from, node_index to, uint64_t bytes, traffic_kind kind,
                                              caf::actor_clock::time_point now, const std::vector<dht_item>* records) {
  const double now_s = std::chrono::duration<double>(now - origin_).count();
  kind_counts& counts = traffic_[static_cast<size_t>(kind)];
  ++counts.messages;
  counts.bytes += bytes;
  auto& per_minute = counts.per_minute;
  const size_t minute = now_s > 0 ? static_cast<size_t>(now_s / 60.0) : 0;
  if (per_minute.size() <= minute) per_minute.resize(minute + 1, 0);
  ++per_minute[minute];
  const bool lost = model_.loss > 0 && from != to && std::uniform_real_distribution<double>(0, 1)(rng_) < model_.loss;
  if (lost || !reachable(from, to)) {
    ++counts.lost;
    return std::nullopt;
  }
  const auto alone = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(latency_s(from, to) + transfer_s(from, to, bytes)));  // on an idle uplink
  if (from == to) return alone;
  node& sender = nodes_[from];
  const auto leaves = std::max(now, sender.uplink_free);  // once the sender's earlier messages have left
  sender.uplink_free = leaves + timespan_of(8.0 * static_cast<double>(bytes) / sender.bandwidth_bps);
  const auto arrives = leaves + alone;
  if (!records || records->empty() || model_.signature_check_us <= 0) return arrives - now;
  node& receiver = nodes_[to];
  const uint64_t fresh = new_records(receiver, *records);
  if (fresh == 0) return arrives - now;
  const double seconds = static_cast<double>(fresh) * model_.signature_check_us * 1e-6;
  signature_checks_ += fresh;
  signature_check_s_ += seconds;
  receiver.checker_free = std::max(arrives, receiver.checker_free) + timespan_of(seconds);
  return receiver.checker_free - now;
}

traffic_counts Network::traffic() const {
  traffic_counts out;
  for (size_t k = 0; k < kTrafficKinds; ++k) {
    const kind_counts& c = traffic_[k];
    if (c.messages == 0) continue;
    const std::string name = kind_name(static_cast<traffic_kind>(k));
    out.messages[name] = c.messages;
    out.bytes[name] = c.bytes;
    out.messages_per_minute[name] = c.per_minute;
    if (c.lost > 0) out.lost[name] = c.lost;
  }
  out.signature_checks = signature_checks_;
  out.signature_check_s = signature_check_s_;
  return out;
}

void Network::set_frozen(node_index n, bool frozen) {
  ++faults_;
  if (frozen)
    frozen_.insert(n);
  else
    frozen_.erase(n);
}

void Network::set_partitioned(size_t region, bool cut) {
  ++faults_;
  if (cut)
    cut_regions_.insert(region);
  else
    cut_regions_.erase(region);
}

void Network::add_link(node_index from, node_index to, caf::weak_actor_ptr link) {
  // Forget dead links whenever the list has doubled since the last time: amortized constant work per link.
  if (links_.size() >= 2 * links_after_purge_ + 64) {
    std::erase_if(links_, [](const link_entry& e) { return !e.link.lock(); });
    links_after_purge_ = links_.size();
  }
  links_.push_back({from, to, std::move(link)});
}

std::vector<caf::strong_actor_ptr> Network::links_touching(node_index n) {
  std::vector<caf::strong_actor_ptr> out;
  std::erase_if(links_, [](const link_entry& e) { return !e.link.lock(); });
  for (const auto& e : links_)
    if (e.from == n || e.to == n)
      if (auto p = e.link.lock()) out.push_back(std::move(p));
  return out;
}

std::vector<caf::strong_actor_ptr> Network::links_crossing(size_t region) {
  std::vector<caf::strong_actor_ptr> out;
  std::erase_if(links_, [](const link_entry& e) { return !e.link.lock(); });
  for (const auto& e : links_)
    if ((nodes_[e.from].region == region) != (nodes_[e.to].region == region))
      if (auto p = e.link.lock()) out.push_back(std::move(p));
  return out;
}

}  // namespace corolla::sim
