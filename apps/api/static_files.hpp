// The web pages (web/: the chat page, the swarm health page): built into the `corolla` binary, so `corolla run`
// works from any directory and nothing needs installing; with a web_dir set they are read from there instead
// (edit a page and reload, no rebuild).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace corolla::api {

struct EmbeddedFile {
  std::string_view path;  // "/index.html"
  std::string_view data;
};
const std::vector<EmbeddedFile>& embedded_web_files();

// "text/html; charset=utf-8" and so on, by extension.
std::string content_type_for(const std::string& path);

// The file served at `path` ("/" is "/index.html"): from web_dir when it is set, else built in. False when there
// is none (or the path tries to leave web_dir).
bool find_web_file(const std::string& web_dir, const std::string& path, std::string& body);

}  // namespace corolla::api
