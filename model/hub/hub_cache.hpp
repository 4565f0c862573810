// The Hugging Face Hub's cache layout, shared with transformers and huggingface_hub: files one of them downloaded
// are found by the others.
//
//   $HF_HUB_CACHE (default $HF_HOME/hub, $HF_HOME default ~/.cache/huggingface)
//     models--org--name/
//       refs/main                          the commit "main" pointed to when last resolved
//       blobs/<etag>                       file contents, named by the Hub's etag (sha256 for LFS files)
//       snapshots/<commit>/config.json     -> ../../blobs/<etag>
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace corolla::hub {

// $HF_HUB_CACHE, or $HF_HOME/hub, or ~/.cache/huggingface/hub.
std::filesystem::path hub_cache_root();
// The access token: $HF_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token (what `huggingface-cli login`
// writes), trimmed; empty when none.
std::string hub_token();
// Whether HF_HUB_OFFLINE is set to a true value (1, true, yes, on).
bool hub_offline();

class HubCache {
 public:
  HubCache(std::filesystem::path root, const std::string& repo);

  const std::filesystem::path& repo_dir() const { return dir_; }
  // The commit a revision was last resolved to (a commit resolves to itself), or nullopt.
  std::optional<std::string> commit_of(const std::string& revision) const;
  // Records revision -> commit (commits themselves are not recorded).
  void set_ref(const std::string& revision, const std::string& commit) const;
  std::filesystem::path blob(const std::string& etag) const { return dir_ / "blobs" / etag; }
  std::filesystem::path snapshot(const std::string& commit) const { return dir_ / "snapshots" / commit; }
  // Points snapshots/<commit>/<file> at blobs/<etag> (a relative link, as huggingface_hub makes them).
  void link(const std::string& commit, const std::string& file, const std::string& etag) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace corolla::hub
