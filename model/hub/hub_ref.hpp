// A model named the way the Hugging Face Hub names it: "org/name" or "org/name@revision" (a branch, a tag or a
// commit), and for a repository of GGUF files, which one after a colon: "org/name:Q4_K_M" (the file whose name
// holds the tag) or "org/name@rev:model-q4_k_m.gguf" (the file itself), as llama.cpp's -hf takes them. Names are typed
// by users and revisions come back from servers; both become parts of URLs and of paths in the cache, so only the
// characters the Hub itself allows pass, and nothing that could climb out of a folder.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace corolla::hub {

struct HubRef {
  std::string repo;               // "org/name"
  std::string revision = "main";  // branch, tag or commit; may hold '/' ("refs/pr/1")
  std::string file;               // after ':': a .gguf file of the repository, or a tag its name holds; may be empty
  std::string str() const {
    return (revision == "main" ? repo : repo + "@" + revision) + (file.empty() ? "" : ":" + file);
  }
};

// The reference `text` names, or nullopt when it does not have the shape of one (a local path such as "./m",
// "/models/x" or "a/b/c" is not one).
std::optional<HubRef> parse_hub_ref(std::string_view text);

// One part of a repository id: letters, digits, '-', '_', '.', 1 to 96 characters, not starting or ending with
// '-' or '.', without "--" or "..".
bool valid_repo_part(std::string_view part);
// A revision: 1 to 200 of letters, digits, '-', '_', '.', '/', with no empty or "." segment and no "..".
bool valid_revision(std::string_view revision);
// A commit id as the Hub sends it: 40 lowercase hexadecimal digits.
bool valid_commit(std::string_view commit);
// A file name inside a repository: '/'-separated segments of letters, digits, '-', '_', '.', none empty or ".",
// no "..", 1 to 255 characters.
bool valid_repo_file(std::string_view file);

// `text` with every byte other than letters, digits and "-_.~" percent-encoded ("refs/pr/1" -> "refs%2Fpr%2F1").
std::string percent_encode(std::string_view text);

}  // namespace corolla::hub
