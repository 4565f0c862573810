// Chaos testing (`corolla serve --inject_step_errors_after N --inject_wrong_outputs P`): a server that fails or
// lies on purpose, so that drills and tests exercise the clients' failover and spot checks against it. The span
// gate holds a FaultInjector only when one of these options asks for it; its steps then pass two seams: before a
// step runs (refuse_step) and once its output is made (served).
#pragma once

#include <caf/error.hpp>
#include <cstdint>
#include <random>

#include "kernels/tensor.hpp"

namespace corolla {

struct fault_options {
  // Once this many steps have been served, every further step is answered with an `internal` error (-1: never).
  int64_t step_errors_after = -1;
  // The fraction of steps whose output is made wrong before it is sent (0: never): every value shifted by the
  // server's own amount (between 1 and 2, drawn from its seed), so that two lying servers do not agree with each
  // other by accident (servers that collude are another matter: docs/SECURITY.md).
  double wrong_outputs = 0;
  bool any() const { return step_errors_after >= 0 || wrong_outputs > 0; }
};

class FaultInjector {
 public:
  FaultInjector(fault_options options, uint64_t seed);
  // The error a step gets instead of running, or none.
  caf::error refuse_step() const;
  // A step's output before it is kept and sent: counted as served, and for a fraction of steps replaced by a
  // wrong copy (the blocks' buffer may be shared).
  void served(Tensor& output);

 private:
  fault_options opt_;
  std::mt19937_64 rng_;
  int64_t served_ = 0;
  float shift_ = 1;
};

}  // namespace corolla
