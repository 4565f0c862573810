// Models by Hub name (model/hub/): what users type and what endpoints send is checked before it becomes a URL or a
// path; which tensors a process needs; how byte ranges are merged; the shared cache's layout.
#define BOOST_TEST_MODULE hub
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "model/hub/http_client.hpp"
#include "model/hub/hub_cache.hpp"
#include "model/hub/hub_client.hpp"
#include "model/hub/hub_ref.hpp"
#include "model/hub/model_needs.hpp"
#include "model/hub/tensor_extract.hpp"
#include "model/weights/weight_source.hpp"

using namespace corolla;
using namespace corolla::hub;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(names_and_revisions) {
  auto r = parse_hub_ref("petals-team/StableBeluga2");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->repo == "petals-team/StableBeluga2");
  BOOST_TEST(r->revision == "main");
  r = parse_hub_ref("meta-llama/Llama-3.1-8B@refs/pr/1");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->revision == "refs/pr/1");
  BOOST_TEST(r->str() == "meta-llama/Llama-3.1-8B@refs/pr/1");
  r = parse_hub_ref("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->repo == "bartowski/Llama-3.2-1B-Instruct-GGUF");
  BOOST_TEST(r->file == "Q4_K_M");
  r = parse_hub_ref("org/name@v1:sub/model-q8_0.gguf");
  BOOST_REQUIRE(r);
  BOOST_TEST(r->revision == "v1");
  BOOST_TEST(r->file == "sub/model-q8_0.gguf");
  BOOST_TEST(r->str() == "org/name@v1:sub/model-q8_0.gguf");
  BOOST_TEST(!parse_hub_ref("org/name:../x.gguf"));
  BOOST_TEST(!parse_hub_ref("org/name:"));
  // Local paths and names that would climb out of a folder or break a URL are not Hub names.
  for (const char* not_a_name : {"demo", "./org/name", "/models/x", "a/b/c", "org/", "/name", "org/na me", "org/..",
                                 "../name", "org/name@", "org/name@../x", "org/name@a//b", "org/-x", "org/x.",
                                 "org/a--b", "org/a..b", "org/name@main/..", "org/na%2Fme"})
    BOOST_TEST(!parse_hub_ref(not_a_name), not_a_name);
  BOOST_TEST(!parse_hub_ref(std::string(97, 'a') + "/x"));
  BOOST_TEST(valid_commit("0123456789abcdef0123456789abcdef01234567"));
  BOOST_TEST(!valid_commit("0123456789ABCDEF0123456789abcdef01234567"));
  BOOST_TEST(!valid_commit("../../../../../../../../../../../../etc/x"));
  BOOST_TEST(valid_repo_file("onnx/model.onnx"));
  BOOST_TEST(!valid_repo_file("../x"));
  BOOST_TEST(!valid_repo_file("/etc/passwd"));
  BOOST_TEST(percent_encode("refs/pr/1") == "refs%2Fpr%2F1");
  BOOST_TEST(percent_encode("v1.0_a-b~") == "v1.0_a-b~");
}

BOOST_AUTO_TEST_CASE(urls) {
  auto u = parse_url("https://huggingface.co");
  BOOST_REQUIRE(u);
  BOOST_TEST(u->host == "huggingface.co");
  BOOST_TEST(u->port == "443");
  BOOST_TEST(u->target == "/");
  u = parse_url("http://127.0.0.1:8080/mirror/");
  BOOST_REQUIRE(u);
  BOOST_TEST(u->port == "8080");
  BOOST_TEST(u->target == "/mirror/");
  BOOST_TEST(u->str() == "http://127.0.0.1:8080/mirror/");
  u = parse_url("http://[::1]:9/x?y=1");
  BOOST_REQUIRE(u);
  BOOST_TEST(u->host == "::1");
  BOOST_TEST(u->target == "/x?y=1");
  for (const char* bad : {"ftp://x", "huggingface.co", "http://", "http://user:pw@host/", "http://h:0/",
                          "http://h:65536/", "http://h:12a/", "http://h o/", "http://[::1/"})
    BOOST_TEST(!parse_url(bad), bad);
  const Url base = *parse_url("http://hub:1/a/resolve/main/config.json");
  auto next = follow_location(base, "/api/resolve-cache/x");
  BOOST_REQUIRE(next);
  BOOST_TEST(next->str() == "http://hub:1/api/resolve-cache/x");
  next = follow_location(base, "https://cdn.example/blob?sig=1");
  BOOST_REQUIRE(next);
  BOOST_TEST(next->origin() == "https://cdn.example:443");
  BOOST_TEST(!follow_location(base, "//evil/x"));
  BOOST_TEST(!follow_location(base, "relative/x"));
}

BOOST_AUTO_TEST_CASE(etags_become_file_names_only_when_plain) {
  BOOST_TEST(bare_etag("W/\"abc\"") == "abc");
  BOOST_TEST(bare_etag("\"abc\"") == "abc");
  BOOST_TEST(valid_etag("b7b7016783ee1f0cd90d084bc61efd5a358bccb8b15054bf317f434a88315da5"));
  BOOST_TEST(!valid_etag("../../x"));
  BOOST_TEST(!valid_etag(""));
  BOOST_TEST(!valid_etag(std::string(129, 'a')));
}

BOOST_AUTO_TEST_CASE(what_each_process_needs) {
  BOOST_TEST(*checkpoint_block_of("model.layers.12.mlp.up_proj.weight") == 12);
  BOOST_TEST(*checkpoint_block_of("transformer.h.3.self_attention.dense.bias") == 3);
  BOOST_TEST(*checkpoint_block_of("h.0.input_layernorm.weight") == 0);
  BOOST_TEST(!checkpoint_block_of("model.embed_tokens.weight"));
  BOOST_TEST(!checkpoint_block_of("lm_head.weight"));
  BOOST_TEST(!checkpoint_block_of("model.layers.weight"));
  BOOST_TEST(!checkpoint_block_of("model.layers.99999999999.x"));

  const ModelNeeds server = ModelNeeds::blocks(2, 4);
  BOOST_TEST(server.wants("model.layers.2.self_attn.q_proj.weight"));
  BOOST_TEST(server.wants("model.layers.3.mlp.down_proj.weight"));
  BOOST_TEST(!server.wants("model.layers.4.mlp.down_proj.weight"));
  BOOST_TEST(!server.wants("model.layers.1.mlp.down_proj.weight"));
  BOOST_TEST(!server.wants("model.embed_tokens.weight"));
  BOOST_TEST(server.label() == "blocks-2-4");
  BOOST_TEST(ModelNeeds::blocks(0, -1).wants("model.layers.77.x"));
  BOOST_TEST(ModelNeeds::blocks(0, -1).label() == "blocks");
  const ModelNeeds client = ModelNeeds::client_head();
  BOOST_TEST(client.wants("lm_head.weight"));
  BOOST_TEST(client.wants("model.norm.weight"));
  BOOST_TEST(!client.wants("model.layers.0.input_layernorm.weight"));
  BOOST_TEST(client.label() == "head");
  BOOST_TEST(ModelNeeds::everything().wants("model.layers.0.input_layernorm.weight"));
  BOOST_TEST(ModelNeeds::everything().label() == "all");
  BOOST_TEST(!ModelNeeds::tokenizer_only().wants("lm_head.weight"));
}

BOOST_AUTO_TEST_CASE(byte_ranges_merge_close_neighbours) {
  auto t = [](uint64_t offset, int64_t n) {
    SafetensorsInfo i;
    i.offset = offset;
    i.nbytes = n;
    return i;
  };
  const auto r = merged_ranges({t(100, 50), t(150, 10), t(170, 30), t(10'000, 5), t(10'005, 0)}, 100);
  BOOST_REQUIRE(r.size() == 2u);
  BOOST_TEST(r[0].begin == 100u);
  BOOST_TEST(r[0].end == 200u);
  BOOST_TEST(r[1].begin == 10'000u);
  BOOST_TEST(r[1].end == 10'005u);
}

BOOST_AUTO_TEST_CASE(cache_layout_is_huggingface_hubs) {
  const fs::path root = fs::temp_directory_path() / ("corolla-hub-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const HubCache cache(root, "org/name");
  BOOST_TEST(cache.repo_dir() == root / "models--org--name");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  BOOST_TEST(!cache.commit_of("main"));
  cache.set_ref("main", commit);
  BOOST_TEST(*cache.commit_of("main") == commit);
  BOOST_TEST(*cache.commit_of(commit) == commit);
  fs::create_directories(cache.blob("e").parent_path());
  std::ofstream(cache.blob("e")) << "x";
  cache.link(commit, "onnx/model.onnx", "e");
  BOOST_TEST(fs::read_symlink(cache.snapshot(commit) / "onnx/model.onnx") == "../../../blobs/e");
  std::ifstream in(cache.snapshot(commit) / "onnx/model.onnx");
  std::string content;
  in >> content;
  BOOST_TEST(content == "x");
  std::ofstream(cache.repo_dir() / "refs" / "main") << "../../etc";  // a damaged ref is no ref
  BOOST_TEST(!cache.commit_of("main"));
  fs::remove_all(root);
}
