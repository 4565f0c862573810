// Talks to a Hugging Face Hub-compatible endpoint ($HF_ENDPOINT, default https://huggingface.co) in the Hub's URL
// scheme: HEAD /<repo>/resolve/<revision>/<file> says which commit the revision is, the file's etag and size, and
// (for files kept in LFS) redirects to where the bytes are; GET fetches them, whole or by byte ranges.
//
// Whole files land in the shared cache (HubCache) as huggingface_hub puts them: written to blobs/<etag>.incomplete,
// resumed from its size after an interruption, checked against the etag (sha256 for LFS files, git's blob sha1 for
// others) before they take their name. Everything the endpoint sends is checked: etags and commits must look like
// what they name before they become file names, sizes bound what is read.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/hub/http_client.hpp"
#include "model/hub/hub_cache.hpp"
#include "model/hub/hub_ref.hpp"

namespace corolla::hub {

// The endpoint refused (401/403), has no such repository, revision or file, or answered in a way that cannot be
// used; the message says which, for whom, and what to do.
struct HubError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RemoteFile {
  std::string repo;
  std::string file;    // path inside the repository
  std::string commit;  // 40 hexadecimal digits
  std::string etag;    // without quotes; a plain file name
  uint64_t size = 0;
  Url location;  // where GET finds the bytes
};

// A repository's files at one commit (the Hub's /api/models/<repo>/revision/<revision>).
struct RepoListing {
  std::string commit;
  std::vector<std::string> files;  // paths inside the repository; names that are not plain paths are left out
};

class HubClient {
 public:
  HubClient(Url endpoint, std::string token) : endpoint_(std::move(endpoint)), token_(std::move(token)) {}
  // $HF_ENDPOINT (default https://huggingface.co) and hub_token(); throws HubError for an endpoint that is not a
  // http(s) URL.
  static HubClient from_environment();

  const Url& endpoint() const { return endpoint_; }
  // The file at `revision` (a branch, tag or commit), or nullopt when the repository has no such file there.
  // Throws HubError for a missing repository or revision, a refusal, or an answer without a usable commit, etag
  // or size; HttpUnreachable when the endpoint cannot be reached.
  std::optional<RemoteFile> describe(const std::string& repo, const std::string& revision,
                                     const std::string& file) const;
  // The files of the repository at `revision`. Throws like describe().
  RepoListing list_files(const std::string& repo, const std::string& revision) const;
  // The file whole in `cache` (downloaded unless its blob is there; an interrupted download resumes), linked into
  // snapshots/<commit>/; returns the blob's path.
  std::filesystem::path download(const HubCache& cache, const RemoteFile& f) const;
  // Bytes [offset, offset + size) of the file, given to `sink` in order; exactly that many or it throws.
  void fetch_range(const RemoteFile& f, uint64_t offset, uint64_t size,
                   const std::function<void(const char*, size_t)>& sink) const;

 private:
  // GET `url` (following up to five redirects; the token goes only to the endpoint's own origin) with `headers`;
  // a 2xx body goes to `sink`. Returns the final answer.
  HttpAnswer get(Url url, std::vector<std::pair<std::string, std::string>> headers,
                 const std::function<void(const char*, size_t)>& sink) const;
  std::vector<std::pair<std::string, std::string>> auth_for(const Url& url) const;
  [[noreturn]] void refuse(const HttpAnswer& a, const std::string& repo, const std::string& revision,
                           const std::string& file) const;

  Url endpoint_;
  std::string token_;
};

// Throws HubError "WHAT needs 12.0 GiB but DIR has 3.1 GiB free" when `dir`'s file system has less room than
// `bytes` (sizes come from the endpoint: a download that cannot fit stops before it starts).
void check_disk_space(const std::filesystem::path& dir, uint64_t bytes, const std::string& what);
// Whether `etag` (quotes taken off) can name a blob: 1 to 128 of letters, digits, '-' and '_'.
bool valid_etag(std::string_view etag);
// An etag header's value without a weak marker and quotes ("W/\"abc\"" -> "abc").
std::string bare_etag(std::string_view header);

}  // namespace corolla::hub
