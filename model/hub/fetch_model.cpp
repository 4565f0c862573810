#include "model/hub/fetch_model.hpp"

#include <unistd.h>

#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "model/hub/hub_client.hpp"
#include "model/hub/tensor_extract.hpp"
#include "model/model_path.hpp"
#include "model/weights/safetensors_index.hpp"

namespace corolla::hub {
namespace fs = std::filesystem;
namespace {

const char* const kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                       "special_tokens_map.json"};
const char* const kIndexFile = "model.safetensors.index.json";
const char* const kSingleFile = "model.safetensors";

std::string read_bounded(const fs::path& path, uintmax_t limit) {
  if (fs::file_size(path) > limit)
    throw HubError(path.string() + ": " + std::to_string(fs::file_size(path)) + " bytes is too large");
  std::ifstream in(path, std::ios::binary);
  return std::string{std::istreambuf_iterator<char>(in), {}};
}

// The folder one process opens, assembled from links and the index of the tensors present.
struct View {
  std::vector<std::pair<std::string, fs::path>> links;  // name in the folder -> file it points to
  std::map<std::string, std::string> index;             // tensor -> file in the folder (sharded models)
  bool sharded = false;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The GGUF file of `files` that `wanted` names: the file itself, or the one whose name holds the tag ("Q4_K_M").
std::string pick_gguf(const std::vector<std::string>& files, const std::string& wanted, const std::string& what) {
  std::vector<std::string> ggufs, matches;
  for (const std::string& f : files)
    if (lower(f).ends_with(".gguf")) ggufs.push_back(f);
  const bool whole_name = lower(wanted).ends_with(".gguf");
  for (const std::string& f : ggufs) {
    const std::string base = lower(f.substr(f.rfind('/') + 1));
    if (whole_name ? f == wanted : base.find(lower(wanted)) != std::string::npos) matches.push_back(f);
  }
  auto listed = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& f : v) out += (out.empty() ? "" : ", ") + f;
    return out.empty() ? std::string("none") : out;
  };
  if (matches.empty())
    throw HubError(what + ": no GGUF file of the repository matches '" + wanted +
                   "' (its GGUF files: " + listed(ggufs) + ")");
  if (matches.size() > 1)
    throw HubError(what + ": several GGUF files match '" + wanted + "' (" + listed(matches) + "); name one");
  const std::string& f = matches.front();
  if (f.find("-of-0") != std::string::npos)
    throw HubError(what + ": " + f +
                   " is one part of a split GGUF file, which Corolla does not read; merge the parts "
                   "(llama-gguf-split --merge) and pass the file's path");
  return f;
}

// Builds `view` beside `dir` and puts it in place whole (another process sees the old folder or the new one).
void install(const View& view, const fs::path& dir) {
  const fs::path tmp = dir.string() + ".tmp-" + std::to_string(getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  for (const auto& [name, target] : view.links) {
    fs::create_directories((tmp / name).parent_path());
    fs::create_symlink(fs::absolute(target), tmp / name);
  }
  if (view.sharded) {
    nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", view.index}};
    std::ofstream(tmp / kIndexFile) << index.dump(1);
  }
  fs::remove_all(dir);
  fs::rename(tmp, dir);
}

class Fetch {
 public:
  Fetch(const HubRef& ref, const ModelNeeds& needs)
      : ref_(ref),
        needs_(needs),
        client_(HubClient::from_environment()),
        cache_(hub_cache_root(), ref.repo),
        own_(fs::path(corolla_cache_dir()) / "hub" / cache_.repo_dir().filename()) {}

  // A GGUF repository's one file, whole, where huggingface_hub would put it (snapshots/<commit>/<file>).
  fs::path gguf_offline() const {
    const auto commit = cache_.commit_of(ref_.revision);
    std::vector<std::string> files;
    std::error_code ec;
    if (commit)
      for (auto it = fs::recursive_directory_iterator(cache_.snapshot(*commit), ec); !ec && it != fs::end(it);
           it.increment(ec))
        files.push_back(it->path().lexically_relative(cache_.snapshot(*commit)).string());
    if (files.empty())
      throw HubError("HF_HUB_OFFLINE is set and " + ref_.str() + " was never fetched here (no " +
                     (cache_.repo_dir() / "refs" / ref_.revision).string() + ")");
    return cache_.snapshot(*commit) / pick_gguf(files, ref_.file, ref_.str() + " (offline, in the cache)");
  }

  fs::path gguf_online() {
    const RepoListing listing = client_.list_files(ref_.repo, ref_.revision);
    const std::string file = pick_gguf(listing.files, ref_.file, ref_.str());
    auto f = client_.describe(ref_.repo, listing.commit, file);
    if (!f) throw HubError(ref_.str() + ": " + file + " is listed but cannot be fetched");
    cache_.set_ref(ref_.revision, f->commit);
    client_.download(cache_, *f);
    return cache_.snapshot(f->commit) / file;
  }

  fs::path offline() const {
    if (!ref_.file.empty()) return gguf_offline();
    const auto commit = cache_.commit_of(ref_.revision);
    if (!commit)
      throw HubError("HF_HUB_OFFLINE is set and " + ref_.str() + " was never fetched here (no " +
                     (cache_.repo_dir() / "refs" / ref_.revision).string() + ")");
    const fs::path dir = view_dir(*commit);
    if (!fs::exists(dir / "config.json"))
      throw HubError("HF_HUB_OFFLINE is set and the files of " + ref_.str() + " that this needs (" + needs_.label() +
                     ") were never fetched here (no " + dir.string() + ")");
    return dir;
  }

  fs::path online() {
    if (!ref_.file.empty()) return gguf_online();
    auto config = client_.describe(ref_.repo, ref_.revision, "config.json");
    if (!config)
      throw HubError(ref_.str() + " on " + client_.endpoint().str() + " has no config.json (for a repository of GGUF " +
                     "files, name one: " + ref_.repo + ":Q4_K_M)");
    commit_ = config->commit;
    cache_.set_ref(ref_.revision, commit_);
    View view;
    view.links.push_back({"config.json", client_.download(cache_, *config)});
    if (needs_.tokenizer)
      for (const char* name : kTokenizerFiles)
        if (auto f = client_.describe(ref_.repo, commit_, name))
          view.links.push_back({name, client_.download(cache_, *f)});
    if (needs_.weights) add_weights(view);
    const fs::path dir = view_dir(commit_);
    install(view, dir);
    return dir;
  }

 private:
  fs::path view_dir(const std::string& commit) const {
    return own_ / commit / needs_.label() / ref_.repo.substr(ref_.repo.find('/') + 1);
  }

  void add_weights(View& view) {
    if (auto index = client_.describe(ref_.repo, commit_, kIndexFile)) {
      const fs::path path = client_.download(cache_, *index);
      const auto weight_map = parse_safetensors_index(read_bounded(path, kMaxSafetensorsIndexBytes), path.string());
      std::map<std::string, std::vector<std::string>> all, wanted;  // shard -> tensor names
      for (const auto& [tensor, shard] : weight_map) {
        all[shard].push_back(tensor);
        if (needs_.wants(tensor)) wanted[shard].push_back(tensor);
      }
      view.sharded = true;
      for (const auto& [shard, names] : wanted) {
        auto f = client_.describe(ref_.repo, commit_, shard);
        if (!f) throw HubError(ref_.str() + ": its index names " + shard + ", which the repository lacks");
        const bool whole = names.size() == all[shard].size();
        view.links.push_back({shard, whole ? client_.download(cache_, *f) : part_of(*f, names, nullptr)});
        for (const std::string& t : whole ? all[shard] : names) view.index[t] = shard;
      }
      return;
    }
    auto single = client_.describe(ref_.repo, commit_, kSingleFile);
    if (!single)
      throw HubError(ref_.str() + " has neither " + kSingleFile + " nor " + kIndexFile +
                     " (for a repository of GGUF files, name one: " + ref_.repo + ":Q4_K_M)");
    if (needs_.label() == "all") {
      view.links.push_back({kSingleFile, client_.download(cache_, *single)});
      return;
    }
    const RemoteSafetensors header = read_remote_header(client_, *single);
    std::vector<std::string> names;
    for (const auto& [name, info] : header.tensors)
      if (needs_.wants(name)) names.push_back(name);
    const bool whole = names.size() == header.tensors.size();
    view.links.push_back({kSingleFile, whole ? client_.download(cache_, *single) : part_of(*single, names, &header)});
  }

  // The file holding `names` of `f`: its blob when the whole file is already in the shared cache, else an extract
  // (made unless an earlier run made it).
  fs::path part_of(const RemoteFile& f, const std::vector<std::string>& names, const RemoteSafetensors* known) {
    std::error_code ec;
    if (fs::is_regular_file(cache_.blob(f.etag), ec) && fs::file_size(cache_.blob(f.etag), ec) == f.size)
      return client_.download(cache_, f);  // links it into the snapshot as well
    const fs::path out = own_ / "extracts" / (f.etag + "-" + needs_.label() + ".safetensors");
    if (fs::exists(out)) return out;
    const RemoteSafetensors header = known ? *known : read_remote_header(client_, f);
    for (const std::string& n : names)
      if (!header.tensors.count(n))
        throw HubError(ref_.str() + ": its index puts tensor '" + n + "' in " + f.file + ", whose header lacks it");
    extract_tensors(client_, header, names, out);
    return out;
  }

  HubRef ref_;
  ModelNeeds needs_;
  HubClient client_;
  HubCache cache_;
  fs::path own_;
  std::string commit_;
};

}  // namespace

fs::path fetch_hub_model(const HubRef& ref, const ModelNeeds& needs) {
  Fetch fetch(ref, needs);
  if (hub_offline()) return fetch.offline();
  try {
    return fetch.online();
  } catch (const HttpUnreachable& e) {
    throw HubError("could not fetch " + ref.str() + " from " + HubClient::from_environment().endpoint().str() + ": " +
                   e.what() + " (to use what an earlier run downloaded, set HF_HUB_OFFLINE=1)");
  }
}

bool is_hub_name(const std::string& name) {
  return name != "demo" && !std::filesystem::exists(name) && parse_hub_ref(name).has_value();
}

std::string locate_model(const std::string& name, const ModelNeeds& needs) {
  if (is_hub_name(name)) return fetch_hub_model(*parse_hub_ref(name), needs).string();
  if (name == "demo") return resolve_model_path(name);
  return name;  // a local path (opening one that does not exist says so)
}

}  // namespace corolla::hub
