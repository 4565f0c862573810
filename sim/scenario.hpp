// A simulation scenario, read from TOML (sim/scenarios/*.toml; every key is described in
// sim/scenarios/README.md). Unknown keys and bad values are errors naming the file, the line and the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/dtype.hpp"
#include "model/config.hpp"
#include "sim/cost_backend.hpp"

namespace corolla::sim {

struct model_shape {
  int64_t blocks = 8;
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 2816;
  int64_t heads = 16;
  int64_t kv_heads = 16;
  int64_t vocab_size = 32000;
  // A mixture of experts (Mixtral's block) when experts > 0: each token's MLP runs experts_per_token of the
  // `experts` MLPs of intermediate_size (a block holds them all; a decode step reads only the chosen ones).
  int64_t experts = 0;
  int64_t experts_per_token = 2;
  DType dtype = DType::f16;  // of the weight matrices
  int64_t swarms = 1;        // models of this shape served on the one DHT, each its own swarm
  ModelConfig config() const;
  // Bytes of one block's weights in `dtype`.
  double block_bytes() const;
};

struct region {
  std::string name;
};

struct region_latency {
  std::string a, b;
  double one_way_ms = 0;
};

struct network_model {
  std::vector<region> regions;
  std::vector<region_latency> latencies;  // between two regions, both ways
  double local_ms = 1;                    // one way, within a region
  double bandwidth_mbps = 1000;           // default of each node's link
  double loss = 0;                        // probability that a message is lost
  double connection_timeout_s = 1;        // a silent peer is declared down after this (the middleman's heartbeat)
  // Each server's and client's wall clock (what a server signs records' expiries in, and every node reads others'
  // against) is off by a uniform draw in [-clock_skew_s, clock_skew_s], a server's the same across its restarts.
  double clock_skew_s = 0;
  // The CPU time a node spends checking the signature of a DHT record new to it (one it has not checked since its
  // cache of 16,384 checked records was last emptied, as signed_record.cpp keeps them): the records a DHT node is
  // asked to store and those a reader gets back are checked before the message takes effect, one after another.
  // 43 µs: libsodium's Ed25519 verification on a 2-core VM (docs/PERFORMANCE.md, "The cost of signed records").
  double signature_check_us = 43;
};

// A class of servers: `count` alike, each drawn within ±jitter of the rates.
struct server_class {
  std::string name = "server";
  int64_t count = 1;
  std::string region;
  double tflops = 100;
  double memory_bandwidth_gbs = 1000;
  double op_overhead_us = 5;
  double efficiency = 1;           // the fraction of both peaks its kernels reach (1: the roofline)
  double jitter = 0;               // relative spread of tflops and bandwidth per server, uniform
  double memory_gb = 0;            // for weights and cache; with num_blocks 0, it sets how many blocks fit
  int64_t num_blocks = 0;          // 0: from memory_gb
  int64_t cache_tokens = 0;        // 0: what memory_gb leaves after the weights
  int64_t max_batch_tokens = 256;  // continuous batching's budget (0: each session's step runs alone)
  double bandwidth_mbps = 0;       // 0: the network's default
  double start_s = 0;              // servers of the class start spread over [start_s, start_s + start_spread_s)
  double start_spread_s = 0;
  // Hostile: the fraction of its steps whose outputs a server of this class makes wrong (fault_injection.hpp; each
  // server its own way), which clients' spot checks are to catch. 0: honest.
  double wrong_outputs = 0;
};

struct client_workload {
  int64_t clients = 1;
  std::vector<std::string> regions;  // clients are spread over them in turn (default: the first region)
  int64_t sessions = 1;              // in total, spread over the clients
  double arrival_rate_per_s = 1;     // Poisson arrivals of sessions (0: all at start_s)
  double start_s = 60;               // when the first session may arrive (servers need time to place themselves)
  int64_t prompt_tokens = 16;
  int64_t prompt_tokens_max = 0;  // > prompt_tokens: uniform in [prompt_tokens, prompt_tokens_max]
  int64_t new_tokens = 16;
  int64_t new_tokens_max = 0;
  int64_t max_length = 512;
  std::string mode = "relay";  // relay or push
  double request_timeout_s = 30;
  double recovery_timeout_s = 120;
  int64_t spot_check_every = 64;  // clients' spot checks (actors/client/spot_check.hpp); 0: none
  // Training sessions (actors/client/training_api.hpp), arriving after the inference sessions by the same rule and
  // spread over the clients the same way: each opens a training session over the swarm and runs training_steps
  // forward and backward passes of [training_batch, training_tokens] random hidden states, in sub-batches of at
  // most training_max_batch_tokens tokens (routes of their own).
  int64_t training_sessions = 0;
  int64_t training_steps = 4;
  int64_t training_batch = 2;
  int64_t training_tokens = 16;
  int64_t training_max_batch_tokens = 4096;
};

struct churn_event {
  double at_s = 0;
  std::string kind;          // crash, leave, freeze, partition, join, slow, restart
  int64_t server = -1;       // server index (crash, leave, freeze, slow: -1 a random live one; restart: -1 a
                             // random one that crashed or left)
  std::string region;        // partition: this region is cut off from the others
  double duration_s = 0;     // freeze, partition, slow
  std::string server_class;  // join: a server of this class
  double latency_ms = 0;     // slow: added to the one-way latency of the server's every message
};

struct churn_model {
  double crash_fraction = 0;  // of the servers, each at a uniform time in [start_s, start_s + within_s)
  double leave_fraction = 0;  // graceful leaves, likewise
  double freeze_fraction = 0;
  double freeze_s = 30;
  double start_s = 0;
  double within_s = 3600;
  std::vector<churn_event> events;  // a schedule, besides the rates
};

// Hostile peers other than servers (a server that lies is its class's wrong_outputs).
struct hostile_model {
  // Impostors: nodes that join the DHT and, every impostor_period_s, announce under their own keys a copy of a live
  // server's record, its address kept, at a hundred times its throughput, its span widened to the whole model or
  // kept (then the server there opens the session, and only the key it proves tells it from the record's).
  // Clients find them out when they connect (the server there proves another key) and route round them.
  int64_t impostors = 0;
  double impostor_start_s = 0;
  double impostor_period_s = 30;
  // The impostors also forge records (sim/forgery.hpp): every period they store forgeries of a swarm's records at
  // the nodes nearest its keys, and their own DHT nodes add forgeries to every answer. Nodes must refuse to store
  // them (forged-refused) and readers to believe them (dht-readable).
  bool forge = false;
  // The impostors also flood (0: not): every period each stores, in each of a swarm's keys at the nodes nearest it,
  // records that check under this many subkeys of fresh keys of its own (keys cost nothing). A DHT node keeps at
  // most its quota per origin (actors/dht/storage.hpp); servers that join must still be listed (dht-readable).
  int64_t flood_subkeys = 0;
};

struct scenario {
  std::string name;
  std::string source;  // the file it was read from
  uint64_t seed = 1;
  double duration_s = 600;
  // Servers: announcement period, rebalancing.
  double announce_period_s = 30;
  double mean_balance_check_s = 120;
  double balance_quality = 0.75;
  model_shape model;
  network_model network;
  std::vector<server_class> servers;
  client_workload workload;
  churn_model churn;
  hostile_model hostile;
  // The event log keeps session steps too (every token); off for big runs.
  bool log_steps = false;
  // The cost model computes digests (sim/cost_backend.hpp) and each completed session's tokens are checked against
  // the whole model run in one process (session-output); activations then take real memory: for small worlds.
  bool check_outputs = false;

  int64_t server_count() const;
  const region* find_region(const std::string& name) const;
};

// Reads and checks a scenario file. Throws ConfigError naming the file, line and key.
scenario read_scenario(const std::string& path);
// The same for a file's text already in memory; `source` names it in messages.
scenario read_scenario_text(std::string_view text, const std::string& source);

}  // namespace corolla::sim
