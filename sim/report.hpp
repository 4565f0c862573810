// The report of a run: a JSON document and a self-contained HTML page (inline SVG plots, no scripts, no external
// files). Both are functions of the run's results alone, so the same seed gives the same bytes; what the run
// cost (wall time, events per second, peak memory) differs between runs and goes in run_cost_json instead.
//
// Contents: sessions (completed, failed; time to first token, step latency and session duration percentiles;
// inference steps/s and tokens/s per session), failovers and recovery times, servers (spans, fates, moves),
// block coverage and capacity over time (per block: online servers and their summed inference rates), tokens/s
// of the whole swarm over time, and traffic by kind (DHT messages per minute among them).
#pragma once

#include <string>

#include "sim/results.hpp"

namespace corolla::sim {

std::string report_json(const sim_results& r);
std::string report_html(const sim_results& r);
std::string run_cost_json(const sim_results& r);

// Nearest-rank percentile (p in [0, 100]) of `values` (sorted or not); 0 for none.
double percentile(std::vector<double> values, double p);

}  // namespace corolla::sim
