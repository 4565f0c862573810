#include "model/hub/hub_client.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/hub/download_progress.hpp"

namespace corolla::hub {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxRedirects = 5;
constexpr int kMaxAttempts = 4;  // a download whose connection breaks resumes from where it stopped

bool hex_of_size(std::string_view s, size_t n) {
  return s.size() == n &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool is_redirect(int status) {
  return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
}

std::optional<uint64_t> parse_size(std::string_view s) {
  uint64_t v = 0;
  if (s.empty() || s.size() > 19) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// What an etag proves about the bytes: sha256 of the content (LFS files), git's blob sha1 ("blob <size>\0" then the
// content; other files), or nothing (an endpoint with etags of its own).
class ContentCheck {
 public:
  ContentCheck(const std::string& etag, uint64_t size) : expected_(etag) {
    const EVP_MD* md = hex_of_size(etag, 64) ? EVP_sha256() : hex_of_size(etag, 40) ? EVP_sha1() : nullptr;
    if (!md) return;
    ctx_.reset(EVP_MD_CTX_new());
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), md, nullptr) != 1) throw std::runtime_error("cannot start a digest");
    if (md == EVP_sha1()) {
      const std::string prefix = "blob " + std::to_string(size) + std::string(1, '\0');
      add(prefix.data(), prefix.size());
    }
  }
  void add(const char* data, size_t n) {
    if (ctx_ && EVP_DigestUpdate(ctx_.get(), data, n) != 1) throw std::runtime_error("digest failed");
  }
  // Empty when the content matches (or nothing can be checked), else what was found.
  std::string mismatch() {
    if (!ctx_) return "";
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), out, &n);
    static const char* hex = "0123456789abcdef";
    std::string got;
    for (unsigned int i = 0; i < n; ++i) got += {hex[out[i] >> 4], hex[out[i] & 15]};
    return got == expected_ ? "" : got;
  }

 private:
  struct Free {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::string expected_;
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

// The file path in a URL: each segment percent-encoded, the slashes kept.
std::string encode_file(const std::string& file) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t slash = file.find('/', start);
    out += percent_encode(file.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) return out;
    out += '/';
    start = slash + 1;
  }
}

}  // namespace

void check_disk_space(const fs::path& dir, uint64_t bytes, const std::string& what) {
  std::error_code ec;
  const fs::space_info space = fs::space(dir, ec);
  if (!ec && bytes > space.available)
    throw HubError(what + " needs " + size_text(bytes) + " but " + dir.string() + " has " + size_text(space.available) +
                   " free");
}

bool valid_etag(std::string_view etag) {
  return !etag.empty() && etag.size() <= 128 && std::all_of(etag.begin(), etag.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
  });
}

std::string bare_etag(std::string_view header) {
  if (header.rfind("W/", 0) == 0) header.remove_prefix(2);
  if (header.size() >= 2 && header.front() == '"' && header.back() == '"') header = header.substr(1, header.size() - 2);
  return std::string(header);
}

HubClient HubClient::from_environment() {
  const char* e = std::getenv("HF_ENDPOINT");
  const std::string text = e && *e ? e : "https://huggingface.co";
  auto url = parse_url(text);
  if (!url) throw HubError("HF_ENDPOINT='" + text + "' is not a http:// or https:// URL");
  while (url->target.size() > 1 && url->target.back() == '/') url->target.pop_back();
  if (url->target == "/") url->target.clear();
  return HubClient(*url, hub_token());
}

std::vector<std::pair<std::string, std::string>> HubClient::auth_for(const Url& url) const {
  if (token_.empty() || url.origin() != endpoint_.origin()) return {};
  return {{"Authorization", "Bearer " + token_}};
}

void HubClient::refuse(const HttpAnswer& a, const std::string& repo, const std::string& revision,
                       const std::string& file) const {
  const std::string code = a.header("x-error-code");
  const std::string where = repo + "@" + revision + " on " + endpoint_.str();
  if (a.status == 401 || a.status == 403) {
    if (code == "GatedRepo")
      throw HubError(repo + " is gated (HTTP " + std::to_string(a.status) +
                     "): accept its conditions on the model's page, then set HF_TOKEN to a token of that account");
    throw HubError("access to " + where + " refused (HTTP " + std::to_string(a.status) + "): " +
                   (token_.empty() ? "no token was sent; set HF_TOKEN (or log in with huggingface-cli)"
                                   : "the token sent (HF_TOKEN or the token file) does not give access"));
  }
  if (a.status == 404 && code == "RevisionNotFound")
    throw HubError("no revision '" + revision + "' in " + repo + " on " + endpoint_.str());
  if (a.status == 404 && code != "EntryNotFound")
    throw HubError("no model " + repo + " on " + endpoint_.str() + " (HTTP 404" + (code.empty() ? "" : ", " + code) +
                   "; a private one needs HF_TOKEN)");
  throw HubError(endpoint_.str() + " answered HTTP " + std::to_string(a.status) + " for " + file + " of " + where);
}

std::optional<RemoteFile> HubClient::describe(const std::string& repo, const std::string& revision,
                                              const std::string& file) const {
  Url url = endpoint_;
  url.target += "/" + repo + "/resolve/" + percent_encode(revision) + "/" + encode_file(file);
  RemoteFile f;
  f.repo = repo;
  f.file = file;
  for (int hop = 0;; ++hop) {
    HttpRequest req;
    req.method = "HEAD";
    req.url = url;
    req.headers = auth_for(url);
    const HttpAnswer a = http_send(req);
    if (f.commit.empty()) f.commit = a.header("x-repo-commit");
    const bool lfs_redirect = is_redirect(a.status) && !a.header("x-linked-etag").empty();
    if (is_redirect(a.status) && !lfs_redirect) {  // a renamed repository, or the Hub's own relative hops
      auto next = follow_location(url, a.header("location"));
      if (!next || hop == kMaxRedirects)
        throw HubError(endpoint_.str() + ": bad or endless redirect for " + file + " of " + repo);
      url = *next;
      continue;
    }
    if (a.status == 404 && a.header("x-error-code") == "EntryNotFound") return std::nullopt;
    if (!lfs_redirect && (a.status < 200 || a.status >= 300)) refuse(a, repo, revision, file);
    const std::string linked = a.header("x-linked-etag");
    f.etag = bare_etag(linked.empty() ? a.header("etag") : linked);
    const std::string linked_size = a.header("x-linked-size");
    const auto size = parse_size(linked_size.empty() ? a.header("content-length") : linked_size);
    if (lfs_redirect) {
      auto where = follow_location(url, a.header("location"));
      if (!where) throw HubError(endpoint_.str() + ": the redirect for " + file + " of " + repo + " is not a URL");
      f.location = *where;
    } else {
      f.location = url;
    }
    if (!valid_commit(f.commit))
      throw HubError(endpoint_.str() + " gave no commit id (X-Repo-Commit) for " + file + " of " + repo);
    if (!valid_etag(f.etag)) throw HubError(endpoint_.str() + " gave no usable etag for " + file + " of " + repo);
    if (!size) throw HubError(endpoint_.str() + " gave no size for " + file + " of " + repo);
    f.size = *size;
    return f;
  }
}

RepoListing HubClient::list_files(const std::string& repo, const std::string& revision) const {
  constexpr size_t kMaxListingBytes = size_t{16} << 20;  // a repository of ten thousand files is a few MB
  Url url = endpoint_;
  url.target += "/api/models/" + repo + "/revision/" + percent_encode(revision);
  std::string body;
  const HttpAnswer a = get(url, {}, [&](const char* d, size_t n) {
    if (n > kMaxListingBytes - body.size()) throw HubError(url.str() + ": listing larger than 16 MiB");
    body.append(d, n);
  });
  if (a.status < 200 || a.status >= 300) refuse(a, repo, revision, "the file list");
  RepoListing out;
  try {
    const nlohmann::json j = nlohmann::json::parse(body);
    out.commit = j.at("sha").get<std::string>();
    for (const auto& s : j.at("siblings"))
      if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string())
        if (const std::string f = s["rfilename"].get<std::string>(); valid_repo_file(f)) out.files.push_back(f);
  } catch (const nlohmann::json::exception& e) {
    throw HubError(url.str() + ": the file list is not what the Hub sends (" + e.what() + ")");
  }
  if (!valid_commit(out.commit)) throw HubError(url.str() + ": the file list has no commit id");
  return out;
}

HttpAnswer HubClient::get(Url url, std::vector<std::pair<std::string, std::string>> headers,
                          const std::function<void(const char*, size_t)>& sink) const {
  for (int hop = 0;; ++hop) {
    HttpRequest req;
    req.url = url;
    req.headers = headers;
    for (auto& h : auth_for(url)) req.headers.push_back(h);
    req.sink = sink;
    HttpAnswer a = http_send(req);
    if (!is_redirect(a.status)) return a;
    auto next = follow_location(url, a.header("location"));
    if (!next || hop == kMaxRedirects) throw HubError(url.str() + ": bad or endless redirect");
    url = *next;
  }
}

fs::path HubClient::download(const HubCache& cache, const RemoteFile& f) const {
  const fs::path blob = cache.blob(f.etag);
  std::error_code ec;
  if (fs::is_regular_file(blob, ec) && fs::file_size(blob, ec) == f.size) {
    cache.link(f.commit, f.file, f.etag);
    return blob;
  }
  fs::create_directories(blob.parent_path());
  const fs::path part = blob.string() + ".incomplete";
  uint64_t have = fs::is_regular_file(part, ec) ? fs::file_size(part, ec) : 0;
  if (ec || have > f.size) have = 0;
  const std::string label = f.repo + "/" + f.file;
  check_disk_space(blob.parent_path(), f.size - have, label);
  for (int attempt = 1;; ++attempt) {
    ContentCheck check(f.etag, f.size);
    if (have > 0) {  // the bytes already here count towards the check
      std::ifstream in(part, std::ios::binary);
      std::vector<char> buf(1 << 20);
      uint64_t left = have;
      while (left > 0 && in.read(buf.data(), static_cast<std::streamsize>(std::min<uint64_t>(left, buf.size())))) {
        check.add(buf.data(), static_cast<size_t>(in.gcount()));
        left -= static_cast<uint64_t>(in.gcount());
      }
      if (left != 0) have = 0;
    }
    std::vector<std::pair<std::string, std::string>> headers;
    if (have > 0) headers.push_back({"Range", "bytes=" + std::to_string(have) + "-"});
    std::fstream out;
    uint64_t received = 0;
    bool opened = false;
    DownloadProgress progress(label, f.size, have);
    auto sink = [&](const char* data, size_t n) {
      if (!opened) throw HubError("unexpected body");
      if (n > f.size - have - received)
        throw HubError(label + ": the server sent more than its " + std::to_string(f.size) + " bytes");
      out.write(data, static_cast<std::streamsize>(n));
      if (!out) throw std::runtime_error(part.string() + ": write failed (disk full?)");
      check.add(data, n);
      received += n;
      progress.add(n);
    };
    HttpAnswer a;
    try {
      // Whether the answer resumes or starts over is known from its status, before the first byte is written.
      auto opening_sink = [&](const char* data, size_t n) {
        if (!opened) {
          opened = true;
          out.open(part, std::ios::binary | std::ios::in | std::ios::out | (have ? std::ios::ate : std::ios::trunc));
          if (!out) out.open(part, std::ios::binary | std::ios::out | std::ios::trunc);
          if (!out) throw std::runtime_error(part.string() + ": cannot write");
        }
        sink(data, n);
      };
      a = get(f.location, headers, opening_sink);
      if (a.status == 200 && have > 0) {  // the server ignored the range: what came is the whole file
        throw HubError(label + ": the server does not resume downloads (HTTP 200 to a range request)");
      }
      if (a.status != 200 && a.status != 206) refuse(a, f.repo, f.commit, f.file);
      if (a.status == 206 && a.header("content-range").rfind("bytes " + std::to_string(have) + "-", 0) != 0)
        throw HubError(label + ": the server resumed at the wrong place (" + a.header("content-range") + ")");
    } catch (const HttpUnreachable& e) {
      out.close();
      if (received == 0 || attempt == kMaxAttempts) throw;
      std::cerr << "\n" << label << ": " << e.what() << "; resuming" << std::endl;
      have += received;
      continue;
    } catch (const HubError&) {
      out.close();
      if (have > 0 && attempt < kMaxAttempts) {  // start over without the range
        fs::remove(part, ec);
        have = 0;
        continue;
      }
      throw;
    }
    if (!opened && f.size == 0) {
      std::ofstream(part, std::ios::binary | std::ios::trunc);
    }
    out.close();
    progress.finish();
    if (have + received != f.size)
      throw HubError(label + ": received " + std::to_string(have + received) + " of " + std::to_string(f.size) +
                     " bytes");
    if (const std::string got = check.mismatch(); !got.empty()) {
      fs::remove(part, ec);
      throw HubError(label + ": content does not match its etag " + f.etag + " (got " + got + "); removed");
    }
    fs::rename(part, blob);
    cache.link(f.commit, f.file, f.etag);
    return blob;
  }
}

void HubClient::fetch_range(const RemoteFile& f, uint64_t offset, uint64_t size,
                            const std::function<void(const char*, size_t)>& sink) const {
  const std::string label = f.repo + "/" + f.file;
  if (size == 0) return;
  if (offset > f.size || size > f.size - offset)
    throw HubError(label + ": bytes " + std::to_string(offset) + "+" + std::to_string(size) + " lie past its end");
  uint64_t received = 0;
  auto take = [&](const char* data, size_t n) {
    if (n > size - received) throw HubError(label + ": the server sent more than the range asked for");
    sink(data, n);
    received += n;
  };
  const std::string range = "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + size - 1);
  const HttpAnswer a = get(f.location, {{"Range", range}}, take);
  if (a.status != 206 && a.status != 200) refuse(a, f.repo, f.commit, f.file);
  if (a.status == 200 && f.size != size)
    throw HubError(label + ": the server does not answer byte ranges (HTTP 200 to a range request)");
  if (a.status == 206 && a.header("content-range").rfind("bytes " + std::to_string(offset) + "-", 0) != 0)
    throw HubError(label + ": the server answered another range (" + a.header("content-range") + ")");
  if (received != size)
    throw HubError(label + ": received " + std::to_string(received) + " of " + std::to_string(size) + " bytes");
}

}  // namespace corolla::hub
