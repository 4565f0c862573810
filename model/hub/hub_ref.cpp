#include "model/hub/hub_ref.hpp"

#include <algorithm>

namespace corolla::hub {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

// '/'-separated segments of word characters, none empty or ".", and no ".." anywhere (git refuses it in ref names).
bool valid_segments(std::string_view text, size_t max_size) {
  if (text.empty() || text.size() > max_size || text.find("..") != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('/', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view seg = text.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == ".." || !std::all_of(seg.begin(), seg.end(), word_char)) return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

bool valid_repo_part(std::string_view part) {
  if (part.empty() || part.size() > 96 || !std::all_of(part.begin(), part.end(), word_char)) return false;
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.') return false;
  return part.find("--") == std::string_view::npos && part.find("..") == std::string_view::npos;
}

bool valid_revision(std::string_view revision) { return valid_segments(revision, 200); }

bool valid_commit(std::string_view commit) {
  return commit.size() == 40 && std::all_of(commit.begin(), commit.end(),
                                            [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool valid_repo_file(std::string_view file) { return valid_segments(file, 255); }

std::optional<HubRef> parse_hub_ref(std::string_view text) {
  HubRef ref;
  if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    const std::string_view file = text.substr(colon + 1);
    if (!valid_repo_file(file)) return std::nullopt;
    ref.file = std::string(file);
    text = text.substr(0, colon);
  }
  std::string_view repo = text;
  if (const size_t at = text.find('@'); at != std::string_view::npos) {
    repo = text.substr(0, at);
    const std::string_view revision = text.substr(at + 1);
    if (!valid_revision(revision)) return std::nullopt;
    ref.revision = std::string(revision);
  }
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  if (!valid_repo_part(repo.substr(0, slash)) || !valid_repo_part(repo.substr(slash + 1))) return std::nullopt;
  ref.repo = std::string(repo);
  return ref;
}

std::string percent_encode(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
        c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace corolla::hub
