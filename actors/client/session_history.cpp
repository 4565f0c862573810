#include "actors/client/session_history.hpp"

#include <cstring>

namespace corolla {
namespace {

// True when `next` continues `prev` in every sequence.
bool continues(const history_entry& prev, const history_entry& next) {
  const int64_t b = prev.hidden.dim(0);
  if (next.hidden.dim(0) != b || next.hidden.dim(2) != prev.hidden.dim(2)) return false;
  const int64_t tp = prev.hidden.dim(1), tn = next.hidden.dim(1);
  for (int64_t i = 0; i < b; ++i)
    if (next.positions[static_cast<size_t>(i * tn)] != prev.positions[static_cast<size_t>((i + 1) * tp - 1)] + 1)
      return false;
  return true;
}

// Concatenates a run of steps along the token axis, sequence by sequence.
history_entry concat(const std::vector<const history_entry*>& run) {
  const int64_t b = run.front()->hidden.dim(0), d = run.front()->hidden.dim(2);
  int64_t total = 0;
  for (const auto* e : run) total += e->hidden.dim(1);
  history_entry out{Tensor::empty(DType::f32, {b, total, d}), std::vector<int32_t>(static_cast<size_t>(b * total))};
  float* dst = out.hidden.data_as<float>();
  for (int64_t i = 0; i < b; ++i) {
    int64_t at = 0;
    for (const auto* e : run) {
      const int64_t t = e->hidden.dim(1);
      const float* src = e->hidden.data_as<const float>() + i * t * d;
      std::memcpy(dst + (i * total + at) * d, src, static_cast<size_t>(t * d) * sizeof(float));
      std::memcpy(out.positions.data() + i * total + at, e->positions.data() + i * t,
                  static_cast<size_t>(t) * sizeof(int32_t));
      at += t;
    }
  }
  return out;
}

}  // namespace

std::vector<history_entry> merge_for_replay(const std::vector<history_entry>& steps) {
  std::vector<history_entry> out;
  std::vector<const history_entry*> run;
  auto flush = [&] {
    if (run.size() == 1)
      out.push_back(*run.front());
    else if (!run.empty())
      out.push_back(concat(run));
    run.clear();
  };
  for (const auto& s : steps) {
    if (!run.empty() && !continues(*run.back(), s)) flush();
    run.push_back(&s);
  }
  flush();
  return out;
}

void reorder_sequences(std::vector<history_entry>& steps, const std::vector<int32_t>& sources) {
  if (sources.empty()) return;
  for (history_entry& e : steps) {
    const int64_t b = e.hidden.dim(0), t = e.hidden.dim(1), d = e.hidden.dim(2);
    history_entry out{Tensor::empty(DType::f32, {b, t, d}), std::vector<int32_t>(e.positions.size())};
    for (int64_t i = 0; i < b; ++i) {
      const int64_t from = sources[static_cast<size_t>(i)];
      std::memcpy(out.hidden.data_as<float>() + i * t * d, e.hidden.data_as<const float>() + from * t * d,
                  static_cast<size_t>(t * d) * sizeof(float));
      std::memcpy(out.positions.data() + i * t, e.positions.data() + from * t,
                  static_cast<size_t>(t) * sizeof(int32_t));
    }
    e = std::move(out);
  }
}

}  // namespace corolla
