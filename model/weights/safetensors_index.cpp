#include "model/weights/safetensors_index.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace corolla {
namespace {

bool plain_shard_name(const std::string& name) {
  return name.size() > 12 && name.ends_with(".safetensors") && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos && name[0] != '.';
}

}  // namespace

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& source) {
  auto fail = [&](const std::string& msg) -> void { throw std::runtime_error(source + ": " + msg); };
  if (text.size() > kMaxSafetensorsIndexBytes) fail("index of " + std::to_string(text.size()) + " bytes is too large");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("an index must be a JSON object with a 'weight_map' object");
  std::map<std::string, std::string> out;
  for (auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) fail("weight_map entry '" + name + "' is not a file name: " + file.dump());
    const std::string shard = file.get<std::string>();
    if (!plain_shard_name(shard))
      fail("weight_map entry '" + name + "' names shard '" + shard +
           "', not a .safetensors file of the model's own directory");
    out.emplace(name, shard);
  }
  return out;
}

}  // namespace corolla
