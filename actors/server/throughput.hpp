// What a server announces as its throughput (Petals' --throughput auto|eval|NUMBER), and the measurement behind
// it. Plain C++ (no actors): `corolla serve` runs it before it starts serving.
//
// Measured on one block of the model in the serving dtype on the serving device:
//   inference_rps  tokens/s of single-token steps with a KV cache (what a generating client sees per block)
//   forward_rps    tokens/s of 1024-token batches without a cache (prefill, training forward passes)
// The rates are cached in the node store's `throughput` family, keyed by the model's shape, the backend (device,
// ISA, threads) and the dtype, so a restart does not measure again; "eval" measures again and replaces them.
// The network estimate (network_probe.hpp) is measured at every start: it depends on where the server runs, not
// on what it computes.
//
// The announced throughput, the figure balancing sums per block, follows Petals: the forward rate divided by the
// blocks a request uses on average ((num_blocks + 1) / 2, a uniformly random start in the span), capped by the
// network rate when one is known. A NUMBER is announced as it is, with unknown (0) rates.
#pragma once

#include <optional>
#include <string>

#include "kernels/backend.hpp"
#include "model/weights/weight_source.hpp"

namespace corolla {

class NodeStore;

struct compute_rates {
  double inference_rps = 0;
  double forward_rps = 0;
};

struct throughput_info {
  double throughput = 0;                                       // announced; what balancing sums
  double inference_rps = 0, forward_rps = 0, network_rps = 0;  // 0 = unknown
  std::string source;                                          // "measured", "cached" or "given": for the server's log
};

struct measure_limits {
  int inference_steps = 100;  // Petals' counts; fewer when the time limit comes first
  int forward_steps = 10;
  int forward_tokens = 1024;  // capped by the model's context
  double seconds_each = 3;    // time limit of each of the two measurements (after one warm-up step)
};

// Loads block 0 of `source` on `backend` in `dtype` (nullopt: as stored) and times it.
compute_rates measure_compute_rates(const WeightSource& source, Backend& backend, std::optional<DType> dtype,
                                    const measure_limits& limits = {});

// "<shape digest>/<backend name>/<dtype>": the store key under which the rates are cached.
std::string throughput_cache_key(const WeightSource& source, const Backend& backend, std::optional<DType> dtype);

// The announced figure from the rates (see above); network_rps 0 means no cap.
double announced_throughput(double forward_rps, double network_rps, int64_t num_blocks);

// Resolves `setting` ("auto", "eval" or a number >= 0, as validated by the node config). With "auto" and
// "eval" the rates come from `store` or a measurement (stored when `store` is given). Throws std::runtime_error
// on a setting that is none of these.
throughput_info resolve_throughput(const std::string& setting, const WeightSource& source, Backend& backend,
                                   std::optional<DType> dtype, int64_t num_blocks, double network_rps, NodeStore* store,
                                   const measure_limits& limits = {});

}  // namespace corolla
