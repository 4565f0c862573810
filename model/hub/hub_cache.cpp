#include "model/hub/hub_cache.hpp"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "model/hub/hub_ref.hpp"

namespace corolla::hub {
namespace fs = std::filesystem;
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

fs::path hf_home() {
  if (std::string h = env("HF_HOME"); !h.empty()) return h;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return fs::path(x) / "huggingface";
  const std::string home = env("HOME");
  return fs::path(home.empty() ? "." : home) / ".cache" / "huggingface";
}

std::string trimmed(std::string s) {
  const auto not_space = [](char c) { return c != ' ' && c != '\n' && c != '\r' && c != '\t'; };
  while (!s.empty() && !not_space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && !not_space(s[i])) ++i;
  return s.substr(i);
}

}  // namespace

fs::path hub_cache_root() {
  if (std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  return hf_home() / "hub";
}

std::string hub_token() {
  if (std::string t = trimmed(env("HF_TOKEN")); !t.empty()) return t;
  const std::string path_env = env("HF_TOKEN_PATH");
  const fs::path path = path_env.empty() ? hf_home() / "token" : fs::path(path_env);
  std::ifstream in(path);
  if (!in) return "";
  std::string line;
  std::getline(in, line);  // a token is one short line; the rest of the file is not read
  if (line.size() > 4096) return "";
  return trimmed(line);
}

bool hub_offline() {
  std::string v = env("HF_HUB_OFFLINE");
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

HubCache::HubCache(fs::path root, const std::string& repo) {
  std::string folder = "models--" + repo;
  for (size_t i = 0; (i = folder.find('/', i)) != std::string::npos;) folder.replace(i, 1, "--");
  dir_ = std::move(root) / folder;
}

std::optional<std::string> HubCache::commit_of(const std::string& revision) const {
  if (valid_commit(revision)) return revision;
  std::ifstream in(dir_ / "refs" / revision);
  std::string commit;
  if (!in || !std::getline(in, commit)) return std::nullopt;
  commit = trimmed(commit);
  if (!valid_commit(commit)) return std::nullopt;  // a damaged ref is as good as none
  return commit;
}

void HubCache::set_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = dir_ / "refs" / revision;
  fs::create_directories(ref.parent_path());
  const fs::path tmp = ref.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out) throw std::runtime_error(tmp.string() + ": cannot write");
  }
  fs::rename(tmp, ref);
}

void HubCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path at = snapshot(commit) / file;
  fs::create_directories(at.parent_path());
  fs::path target = fs::path("..") / ".." / "blobs" / etag;  // from snapshots/<commit>/
  for (char c : file)
    if (c == '/') target = ".." / target;  // one more level for each folder of a nested file
  std::error_code ec;
  fs::remove(at, ec);
  fs::create_symlink(target, at);
}

}  // namespace corolla::hub
