#include "apps/api/static_files.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace corolla::api {

std::string content_type_for(const std::string& path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

bool find_web_file(const std::string& web_dir, const std::string& path_in, std::string& body) {
  const std::string path = path_in == "/" ? "/index.html" : path_in;
  if (path.find("..") != std::string::npos || path.find('\\') != std::string::npos) return false;
  if (!web_dir.empty()) {
    const std::filesystem::path file = std::filesystem::path(web_dir) / path.substr(1);
    if (!std::filesystem::is_regular_file(file)) return false;
    std::ifstream in(file, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    body = ss.str();
    return true;
  }
  for (const auto& f : embedded_web_files())
    if (f.path == path) {
      body = std::string(f.data);
      return true;
    }
  return false;
}

}  // namespace corolla::api
