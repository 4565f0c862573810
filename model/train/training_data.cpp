#include "model/train/training_data.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "model/tokenizer/tokenizer.hpp"

namespace corolla {

int64_t TrainingBatch::tokens() const {
  int64_t n = 0;
  for (int64_t l : lengths) n += l;
  return n;
}

std::vector<TrainingExample> read_training_jsonl(const std::string& path, const Tokenizer* tokenizer,
                                                 int64_t max_length, bool truncate) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open the training data");
  std::vector<TrainingExample> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = path + ":" + std::to_string(number) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw std::invalid_argument(where + "not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw std::invalid_argument(where + "an example must be a JSON object");
    TrainingExample ex;
    try {
      if (j.contains("ids")) {
        for (const auto& id : j.at("ids")) ex.ids.push_back(id.get<int32_t>());
      } else if (j.contains("text")) {
        if (!tokenizer) throw std::invalid_argument("\"text\" needs the model's tokenizer (or give \"ids\")");
        ex.ids = tokenizer->encode(j.at("text").get<std::string>());
      } else {
        throw std::invalid_argument("an example needs \"text\" or \"ids\"");
      }
      if (j.contains("label")) ex.label = j.at("label").get<int32_t>();
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(where + e.what());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    }
    if (ex.ids.empty()) throw std::invalid_argument(where + "the example has no tokens");
    if (static_cast<int64_t>(ex.ids.size()) > max_length) {
      if (!truncate)
        throw std::invalid_argument(where + std::to_string(ex.ids.size()) + " tokens exceed the maximum of " +
                                    std::to_string(max_length));
      ex.ids.resize(static_cast<size_t>(max_length));
    }
    out.push_back(std::move(ex));
  }
  if (out.empty()) throw std::invalid_argument(path + ": no training examples");
  return out;
}

TrainingBatch make_batch(std::span<const TrainingExample> examples, int32_t pad_id) {
  if (examples.empty()) throw std::invalid_argument("a training batch needs at least one example");
  TrainingBatch b;
  b.batch = static_cast<int64_t>(examples.size());
  for (const auto& ex : examples) b.length = std::max<int64_t>(b.length, static_cast<int64_t>(ex.ids.size()));
  const bool labelled = examples.front().label >= 0;
  b.ids.assign(static_cast<size_t>(b.batch * b.length), pad_id);
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& ex = examples[i];
    if (ex.ids.empty()) throw std::invalid_argument("example " + std::to_string(i) + " of the batch has no tokens");
    if ((ex.label >= 0) != labelled)
      throw std::invalid_argument("examples with and without labels are mixed in one batch");
    std::copy(ex.ids.begin(), ex.ids.end(), b.ids.begin() + static_cast<std::ptrdiff_t>(i * b.length));
    b.lengths.push_back(static_cast<int64_t>(ex.ids.size()));
    if (labelled) b.labels.push_back(ex.label);
  }
  return b;
}

}  // namespace corolla
