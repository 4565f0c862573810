// What becomes a URL or a path when a model is fetched by name (model/hub/): a name typed by a user, an endpoint,
// a Location header. A name that passes never climbs out of a folder; a URL that parses has a host and a port.
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include "model/hub/http_client.hpp"
#include "model/hub/hub_ref.hpp"

using namespace corolla::hub;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    if (auto ref = parse_hub_ref(text)) {
      const std::string both = ref->repo + "/" + ref->revision + "/" + ref->file;
      if (both.find("..") != std::string::npos || both.find('\\') != std::string::npos || both.starts_with("/") ||
          both.find('\0') != std::string::npos)
        __builtin_trap();
    }
    if (auto url = parse_url(text)) {
      if (url->host.empty() || url->port.empty() || url->target.empty() || url->target[0] != '/') __builtin_trap();
      if (auto again = parse_url(url->str()); !again || again->str() != url->str()) __builtin_trap();
    }
    static const Url base = *parse_url("http://127.0.0.1:8080/org/name/resolve/main/config.json");
    if (auto next = follow_location(base, text))
      if (next->host.empty() || next->target.empty() || next->target[0] != '/') __builtin_trap();
  } catch (const std::bad_alloc&) {
    __builtin_trap();
  } catch (const std::exception&) {
  }
  return 0;
}
