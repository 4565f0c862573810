#include "model/model_path.hpp"

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace corolla {

std::string corolla_cache_dir() {
  const char* h = std::getenv("HOME");
  const std::string home = h ? h : ".";
  if (const char* c = std::getenv("COROLLA_CACHE"); c && *c) {
    const std::string dir = c;
    if (dir == "~") return home;
    if (dir.rfind("~/", 0) == 0) return home + dir.substr(1);
    return dir;
  }
  return home + "/.cache/corolla";
}

std::string demo_model_path() { return corolla_cache_dir() + "/demo/" + kDemoModelFile; }

std::string resolve_model_path(const std::string& name) {
  if (name != "demo") return name;
  std::string path = demo_model_path();
  if (!std::filesystem::exists(path))
    throw std::runtime_error("the demo model is not downloaded (expected " + path +
                             "); run: bash tools/fetch_demo_model.sh");
  return path;
}

}  // namespace corolla
