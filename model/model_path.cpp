#include "model/model_path.hpp"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace corolla {

std::string demo_model_path() {
  std::string cache;
  if (const char* c = std::getenv("COROLLA_CACHE"); c && *c) {
    cache = c;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home ? home : ".") + "/.cache/corolla";
  }
  return cache + "/demo/" + kDemoModelFile;
}

std::string resolve_model_path(const std::string& name) {
  if (name != "demo") return name;
  std::string path = demo_model_path();
  if (!std::filesystem::exists(path))
    throw std::runtime_error("the demo model is not downloaded (expected " + path +
                             "); run: bash tools/fetch_demo_model.sh");
  return path;
}

}  // namespace corolla
