// The throughput a server announces: measured on one block, cached in the node store by model shape, backend
// and dtype, measured again on "eval", or given as a number.
#define BOOST_TEST_MODULE throughput
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>

#include "actors/server/throughput.hpp"
#include "actors/store/node_store.hpp"
#include "support/golden.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

measure_limits quick() {
  measure_limits l;
  l.inference_steps = 8;
  l.forward_steps = 2;
  l.forward_tokens = 64;
  l.seconds_each = 0.5;
  return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(measuring_one_block_gives_positive_rates) {
  auto source = open_weights(model_dir("llama"));
  auto backend = make_cpu_backend(1);
  const compute_rates r = measure_compute_rates(*source, *backend, std::nullopt, quick());
  BOOST_TEST(r.inference_rps > 0);
  BOOST_TEST(r.forward_rps > 0);
  BOOST_TEST(std::isfinite(r.inference_rps));
  BOOST_TEST(std::isfinite(r.forward_rps));
}

BOOST_AUTO_TEST_CASE(a_measurement_stops_at_its_time_limit) {
  // Far more steps than fit in the time limit: each measurement ends after about seconds_each.
  auto source = open_weights(model_dir("llama"));
  auto backend = make_cpu_backend(1);
  measure_limits l = quick();
  l.inference_steps = 1000000;
  l.forward_steps = 1000000;
  l.seconds_each = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  measure_compute_rates(*source, *backend, std::nullopt, l);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(s >= 0.4);
  BOOST_TEST(s < 5.0);
}

BOOST_AUTO_TEST_CASE(auto_measures_once_then_reads_the_store_and_eval_measures_again) {
  TempDir dir;
  auto source = open_weights(model_dir("llama"));
  auto backend = make_cpu_backend(1);
  NodeStore store(dir.str());
  const auto first = resolve_throughput("auto", *source, *backend, std::nullopt, 4, 0, &store, quick());
  BOOST_TEST(first.source == "measured");
  BOOST_TEST(first.throughput == announced_throughput(first.forward_rps, 0, 4));
  const auto second = resolve_throughput("auto", *source, *backend, std::nullopt, 4, 0, &store, quick());
  BOOST_TEST(second.source == "cached");
  BOOST_TEST(second.inference_rps == first.inference_rps);
  BOOST_TEST(second.forward_rps == first.forward_rps);
  // Another serving dtype is another key: measured.
  BOOST_TEST(resolve_throughput("auto", *source, *backend, DType::q8_0, 4, 0, &store, quick()).source == "measured");
  BOOST_TEST(throughput_cache_key(*source, *backend, DType::q8_0) !=
             throughput_cache_key(*source, *backend, std::nullopt));
  // "eval" measures again and replaces what is stored.
  const auto again = resolve_throughput("eval", *source, *backend, std::nullopt, 4, 0, &store, quick());
  BOOST_TEST(again.source == "measured");
  const auto key = throughput_cache_key(*source, *backend, std::nullopt);
  BOOST_TEST(*store.throughput(key + "/forward_rps") == again.forward_rps);
  // The network caps what is announced; the block count spreads it.
  const auto capped = resolve_throughput("auto", *source, *backend, std::nullopt, 4, 3.5, &store, quick());
  BOOST_TEST(capped.throughput == 3.5);
  BOOST_TEST(capped.network_rps == 3.5);
}

BOOST_AUTO_TEST_CASE(a_number_is_announced_as_given) {
  auto source = open_weights(model_dir("llama"));
  auto backend = make_cpu_backend(1);
  const auto r = resolve_throughput("250.5", *source, *backend, std::nullopt, 4, 0, nullptr);
  BOOST_TEST(r.throughput == 250.5);
  BOOST_TEST(r.source == "given");
  BOOST_TEST(r.inference_rps == 0.0);
  BOOST_CHECK_THROW(resolve_throughput("fast", *source, *backend, std::nullopt, 4, 0, nullptr), std::runtime_error);
  BOOST_CHECK_THROW(resolve_throughput("-3", *source, *backend, std::nullopt, 4, 0, nullptr), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(the_announced_figure_follows_petals) {
  // Forward rate over the average blocks a request uses ((n + 1) / 2), capped by the network.
  BOOST_TEST(announced_throughput(1000, 0, 1) == 1000.0);
  BOOST_TEST(announced_throughput(1000, 0, 9) == 200.0);
  BOOST_TEST(announced_throughput(1000, 150, 9) == 150.0);
}
