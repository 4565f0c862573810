// What every Corolla actor system needs: the middleman, the wire message types, the error category, and
// failure-detection settings (a frozen peer is noticed within about a second).
#pragma once

#include <caf/actor_system_config.hpp>

namespace corolla {

class corolla_config : public caf::actor_system_config {
 public:
  corolla_config();
};

// Registers Corolla's wire types and error category on any actor_system_config (tests use their own configs).
void add_corolla_types(caf::actor_system_config& cfg);

}  // namespace corolla
