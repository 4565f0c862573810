#include "actors/protocol/errors.hpp"

#include <caf/deep_to_string.hpp>
#include <caf/make_message.hpp>

namespace corolla {

caf::error make_error(errc code, std::string message) {
  return caf::error(static_cast<uint8_t>(code), kErrorCategory, caf::make_message(std::move(message)));
}

std::string errc_name(errc code) {
  switch (code) {
    case errc::ok: return "ok";
    case errc::bad_request: return "bad_request";
    case errc::out_of_cache: return "out_of_cache";
    case errc::max_length_exceeded: return "max_length_exceeded";
    case errc::unknown_session: return "unknown_session";
    case errc::unknown_block: return "unknown_block";
    case errc::peer_unavailable: return "peer_unavailable";
    case errc::timeout: return "timeout";
    case errc::internal: return "internal";
    case errc::no_route: return "no_route";
    case errc::unexpected_message: return "unexpected_message";
  }
  return "error_" + std::to_string(static_cast<int>(code));
}

std::string render_error(uint8_t code, caf::atom_value, const caf::message& context) {
  std::string out = errc_name(static_cast<errc>(code));
  if (context.match_elements<std::string>()) out += ": " + context.get_as<std::string>(0);
  else if (!context.empty()) out += ": " + caf::deep_to_string(context);
  return out;
}

std::string describe(const caf::error& e) {
  if (!e) return "ok";
  if (e.category() == kErrorCategory) return render_error(e.code(), e.category(), e.context());
  return caf::to_string(e);
}

bool is(const caf::error& e, errc code) { return e && e.category() == kErrorCategory && e.code() == static_cast<uint8_t>(code); }

}  // namespace corolla
