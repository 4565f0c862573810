// The simulated network: where each node is (its region and link bandwidth), what a message between two nodes
// costs (the regions' one-way latency plus its bytes over the slower of the two links, once the messages the sender
// sent before it have left: a node's uplink is shared by everything it sends), which messages are lost
// (seeded), and which nodes cannot reach each other (crashed, frozen, or cut off by a partition). Plain C++ used
// by the links (sim/sim_link.hpp) and connectors (sim/sim_connector.hpp) on the simulation's one thread.
#pragma once

#include <array>
#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/timespan.hpp>
#include <chrono>
#include <caf/weak_intrusive_ptr.hpp>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "actors/dht/dht_messages.hpp"
#include "sim/message_size.hpp"
#include "sim/scenario.hpp"

namespace corolla::sim {

using node_index = size_t;

// Seconds of virtual time (scenarios and the network model count in seconds) as an actor-clock duration.
inline caf::timespan timespan_of(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds));
}

// Message counts and bytes by kind (dht, step, session, info, other), overall and per minute of virtual time.
struct traffic_counts {
  std::map<std::string, uint64_t> messages, bytes, lost;
  std::map<std::string, std::vector<uint64_t>> messages_per_minute;
  // Signatures of DHT records checked by the nodes that received them, and the CPU time that took.
  uint64_t signature_checks = 0;
  double signature_check_s = 0;
};

class Network {
 public:
  Network(const network_model& model, uint64_t seed);

  node_index add_node(std::string name, const std::string& region, double bandwidth_mbps);
  const std::string& name(node_index n) const { return nodes_[n].name; }
  size_t region_of(node_index n) const { return nodes_[n].region; }
  size_t size() const { return nodes_.size(); }

  // Addresses: an actor reachable by the other nodes (a server's gate), and the node it lives on. `dht`: the DHT
  // node the gate hands DHT RPCs to, when it has one (see sim_link.hpp).
  void publish(const std::string& address, node_index node, caf::actor actor, dht_rpc_actor dht = {});
  struct endpoint {
    node_index node;
    caf::actor actor;
    dht_rpc_actor dht;
  };
  std::optional<endpoint> lookup(const std::string& address) const;

  // One-way latency between two nodes (seconds), and the time `bytes` take on the wire between them.
  double latency_s(node_index from, node_index to) const;
  double transfer_s(node_index from, node_index to, uint64_t bytes) const;
  // The delivery delay of one message of `bytes` (counted under `kind`), or nullopt when it is lost or the nodes
  // cannot reach each other. A delivered message starts leaving once the sender's earlier messages have left its
  // uplink (a server's replies to all its sessions share it); the receiver's link is not modelled as shared. A
  // message carrying signed `records` takes effect once the receiver has checked the signatures new to it, after
  // the records of the messages that came before (network_model::signature_check_us).
  std::optional<caf::timespan> deliver(node_index from, node_index to, uint64_t bytes, traffic_kind kind,
                                       caf::actor_clock::time_point now,
                                       const std::vector<dht_item>* records = nullptr);
  // Virtual time zero of the simulation (the per-minute counts start there).
  void set_origin(caf::actor_clock::time_point origin) { origin_ = origin; }

  // Reachability.
  bool reachable(node_index from, node_index to) const;
  void crash(node_index n) {
    crashed_.insert(n);
    ++faults_;
  }
  bool crashed(node_index n) const { return crashed_.count(n) != 0; }
  void set_frozen(node_index n, bool frozen);
  // Adds `seconds` to the one-way latency of every message to or from `n` (0: back to normal): a latency spike.
  void set_extra_latency(node_index n, double seconds);
  // Cuts `region` off from every other region (or heals the cut).
  void set_partitioned(size_t region, bool cut);
  std::optional<size_t> find_region(const std::string& name) const;
  double connection_timeout_s() const { return model_.connection_timeout_s; }
  // Counts the faults so far (crashes, freezes and thaws, partitions and heals, latency spikes): a request that
  // went unanswered with no fault since it was sent was not answered by its receiver.
  uint64_t faults() const { return faults_; }
  bool loses_messages() const { return model_.loss > 0; }

  // Links (sim_link actors) register themselves, so that a freeze or partition can bring them down.
  void add_link(node_index from, node_index to, caf::weak_actor_ptr link);
  // The live links between `n` and any node (either direction), forgetting dead ones.
  std::vector<caf::strong_actor_ptr> links_touching(node_index n);
  // The live links that cross between the nodes of `region` and the others.
  std::vector<caf::strong_actor_ptr> links_crossing(size_t region);

  // The counts by kind name; a kind appears once a message of it was sent (in `lost` once one was lost).
  traffic_counts traffic() const;

 private:
  struct node {
    std::string name;
    size_t region;
    double bandwidth_bps;
    // When the messages it sent so far have left its uplink.
    caf::actor_clock::time_point uplink_free{};
    // When it has checked the signatures of the records it received so far, and which it has checked: a hash per
    // record, emptied at kCheckedRecordsKept (as a process's cache, signed_record.hpp).
    caf::actor_clock::time_point checker_free{};
    std::unordered_set<uint64_t> checked;
  };
  // How many of `records` `n` has not checked yet; they count as checked from now on.
  uint64_t new_records(node& n, const std::vector<dht_item>& records);
  struct link_entry {
    node_index from, to;
    caf::weak_actor_ptr link;
  };

  network_model model_;
  std::vector<std::string> region_names_;
  std::vector<std::vector<double>> latency_s_;  // [from region][to region]
  std::vector<node> nodes_;
  std::unordered_map<std::string, endpoint> published_;  // looked up at every new connection: hashed
  std::set<node_index> crashed_, frozen_;
  std::map<node_index, double> extra_latency_s_;
  std::set<size_t> cut_regions_;
  uint64_t faults_ = 0;
  std::vector<link_entry> links_;
  size_t links_after_purge_ = 0;
  std::mt19937_64 rng_;
  // Counted per kind in arrays, one add per message (a map by name cost a lookup per count).
  struct kind_counts {
    uint64_t messages = 0, bytes = 0, lost = 0;
    std::vector<uint64_t> per_minute;
  };
  std::array<kind_counts, kTrafficKinds> traffic_{};
  caf::actor_clock::time_point origin_{};
  uint64_t signature_checks_ = 0;
  double signature_check_s_ = 0;
};

}  // namespace corolla::sim
