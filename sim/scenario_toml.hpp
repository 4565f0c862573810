// A scenario written as the TOML that read_scenario reads (sim/scenarios/README.md), every key explicit, numbers
// exact: reading the text back gives the same scenario. A random world (sim/random_world.hpp) or a shrunk one
// (sim/sweep.hpp) becomes a file to keep beside a regression test, to edit, or to run with `corolla sim FILE`.
#pragma once

#include <string>

#include "sim/scenario.hpp"

namespace corolla::sim {

std::string scenario_toml(const scenario& sc);

}  // namespace corolla::sim
