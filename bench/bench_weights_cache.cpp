// Weights cache: time to load every block of a model with and without the node store's converted-weights cache.
//
//   bench_weights_cache [model] [--rounds N] [--dir DIR] [--dtypes f32,auto,q8_0]
//
// For each serving dtype (default: f32, a GGUF model is dequantized; auto, stored dtypes kept and GGUF Q/K rows
// un-permuted; q8_0, requantized):
//   uncached  open_weights + load_block for every block, no store (what every start costs without the cache)
//   cold      the same through load_block_cached on an empty database: convert, then write every block
//             (+ close: closing the store flushes what is still in memtables)
//   warm      reopen the store, load_block_cached again: every block is a hit
// Each figure is the median of N rounds (a fresh database for each cold round). The model file and the database
// are in the page cache (a restart, not a reboot). Default model: the demo model (tools/fetch_demo_model.sh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "actors/store/node_store.hpp"
#include "actors/store/weights_cache.hpp"

using namespace corolla;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Pass {
  double seconds = 0;
  uint64_t record_bytes = 0;
  int hits = 0, misses = 0;
};

// Opens the model and loads every block (through the store when given one), as a starting server would.
Pass load_all(const std::string& model, NodeStore* store, std::optional<DType> dtype, Backend& backend) {
  const auto t0 = Clock::now();
  auto source = open_weights(model);
  const std::string digest = store ? model_digest(*source) : std::string();
  std::vector<std::unique_ptr<Block>> blocks;
  Pass p;
  for (int64_t i = 0; i < source->config().num_layers; ++i) {
    LoadReport r;
    blocks.push_back(load_block_cached(store, digest, *source, i, backend, {dtype}, &r));
    if (!r.problem.empty()) std::cerr << "block " << i << ": " << r.problem << "\n";
    p.record_bytes += r.cache_bytes;
    p.hits += r.outcome == LoadReport::Outcome::hit;
    p.misses += r.outcome == LoadReport::Outcome::miss;
  }
  p.seconds = seconds_since(t0);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const char* cache = std::getenv("COROLLA_CACHE");
  const char* home = std::getenv("HOME");
  std::string model = (cache ? std::string(cache) : std::string(home ? home : ".") + "/.cache/corolla") +
                      "/demo/SmolLM2-135M-Instruct.Q4_1.gguf";
  int rounds = 3;
  std::vector<std::optional<DType>> dtypes = {DType::f32, std::nullopt, DType::q8_0};
  fs::path dir = fs::temp_directory_path() / ("corolla-bench-weights-cache-" + std::to_string(::getpid()));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes.clear();
      std::string list = argv[++i], item;
      for (size_t start = 0; start <= list.size();) {
        const size_t end = std::min(list.find(',', start), list.size());
        item = list.substr(start, end - start);
        start = end + 1;
        if (item == "auto") {
          dtypes.push_back(std::nullopt);
        } else if (auto d = parse_dtype(item)) {
          dtypes.push_back(*d);
        } else {
          std::cerr << "--dtypes: unknown dtype '" << item << "'\n";
          return 2;
        }
      }
    } else if (a.starts_with("--")) {
      std::cerr << "usage: bench_weights_cache [model] [--rounds N] [--dir DIR] [--dtypes f32,auto,q8_0]\n";
      return 2;
    } else {
      model = a;
    }
  }
  if (!fs::exists(model)) {
    std::cerr << model << ": not found (run tools/fetch_demo_model.sh)\n";
    return 1;
  }
  auto backend = make_cpu_backend();
  {
    auto source = open_weights(model);
    std::printf("model %s: %lld blocks, %s\n", model.c_str(), static_cast<long long>(source->config().num_layers),
                source->config().arch.c_str());
  }
  std::printf("%-5s %10s %10s %10s %10s %10s %14s %14s\n", "dtype", "uncached", "cold", "+close", "warm", "record MB",
              "uncached/warm", "cold/warm");
  load_all(model, nullptr, std::nullopt, *backend);  // page the model file in once
  for (std::optional<DType> dtype : dtypes) {
    std::vector<double> uncached, cold, close, warm;
    uint64_t bytes = 0;
    for (int r = 0; r < rounds; ++r) {
      uncached.push_back(load_all(model, nullptr, dtype, *backend).seconds);
      fs::remove_all(dir);
      {
        auto store = std::make_unique<NodeStore>(dir.string());
        const Pass c = load_all(model, store.get(), dtype, *backend);
        if (c.hits) std::cerr << "cold pass had " << c.hits << " hits\n";
        cold.push_back(c.seconds);
        bytes = c.record_bytes;
        const auto t0 = Clock::now();
        store.reset();
        close.push_back(seconds_since(t0));
      }
      NodeStore store(dir.string());
      const Pass w = load_all(model, &store, dtype, *backend);
      if (w.misses) std::cerr << "warm pass had " << w.misses << " misses\n";
      warm.push_back(w.seconds);
    }
    fs::remove_all(dir);
    const double u = median(uncached), c = median(cold), cl = median(close), w = median(warm);
    std::printf("%-5s %9.3fs %9.3fs %9.3fs %9.3fs %10.1f %13.1fx %13.1fx\n", serving_dtype_key(dtype).c_str(), u, c, cl,
                w, static_cast<double>(bytes) / 1e6, u / w, c / w);
  }
  return 0;
}
