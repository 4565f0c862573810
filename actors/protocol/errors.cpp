#include "actors/protocol/errors.hpp"

#include <caf/deep_to_string.hpp>
#include <caf/make_message.hpp>
#include <algorithm>

namespace corolla {

caf::error make_error(errc code, std::string message) {
  return caf::error(static_cast<uint8_t>(code), kErrorCategory, caf::make_message(std::move(message)));
}

caf::error make_busy_error(std::string message, std::chrono::milliseconds retry_after) {
  const auto ms = static_cast<uint64_t>(std::max<int64_t>(0, retry_after.count()));
  return caf::error(static_cast<uint8_t>(errc::too_busy), kErrorCategory,
                    caf::make_message(std::move(message) + "; retry in " + std::to_string(ms) + " ms", ms));
}

std::optional<std::chrono::milliseconds> retry_after(const caf::error& e) {
  if (!is(e, errc::too_busy) || !e.context().match_elements<std::string, uint64_t>()) return std::nullopt;
  const uint64_t ms = std::min<uint64_t>(e.context().get_as<uint64_t>(1), 3'600'000);  // a peer's hint: bounded
  return std::chrono::milliseconds(static_cast<int64_t>(ms));
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
    case errc::wrong_output: return "wrong_output";
    case errc::too_busy: return "too_busy";
  }
  return "error_" + std::to_string(static_cast<int>(code));
}

std::string render_error(uint8_t code, caf::atom_value, const caf::message& context) {
  std::string out = errc_name(static_cast<errc>(code));
  if (context.match_elements<std::string>() || context.match_elements<std::string, uint64_t>())
    out += ": " + context.get_as<std::string>(0);
  else if (!context.empty())
    out += ": " + caf::deep_to_string(context);
  return out;
}

std::string describe(const caf::error& e) {
  if (!e) return "ok";
  if (e.category() == kErrorCategory) return render_error(e.code(), e.category(), e.context());
  return caf::to_string(e);
}

bool is(const caf::error& e, errc code) {
  return e && e.category() == kErrorCategory && e.code() == static_cast<uint8_t>(code);
}

}  // namespace corolla
