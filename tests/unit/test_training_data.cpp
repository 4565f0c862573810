// Training data: JSON Lines examples, their errors (naming the file and line), and padded batches.
#define BOOST_TEST_MODULE training_data
#include <boost/test/unit_test.hpp>
#include <fstream>

#include "model/train/training_data.hpp"
#include "support/temp_dir.hpp"

using namespace corolla;
using namespace corolla::test;

namespace {

std::string write(const TempDir& dir, const std::string& text) {
  const std::string path = dir.str() + "/data.jsonl";
  std::ofstream(path) << text;
  return path;
}

void fails_with(const std::string& path, const std::string& words) {
  try {
    read_training_jsonl(path, nullptr, 16);
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find(words) != std::string::npos, e.what());
    return;
  }
  BOOST_FAIL("no error for " << path);
}

}  // namespace

BOOST_AUTO_TEST_CASE(examples_are_read_truncated_and_batched) {
  TempDir dir;
  auto ex = read_training_jsonl(write(dir, "{\"ids\": [5, 6, 7]}\n\n{\"ids\": [1, 2, 3, 4, 5, 6], \"label\": 1}\n"),
                                nullptr, 4);
  BOOST_REQUIRE_EQUAL(ex.size(), 2u);
  BOOST_TEST(ex[0].ids == (std::vector<int32_t>{5, 6, 7}), boost::test_tools::per_element());
  BOOST_TEST(ex[1].ids == (std::vector<int32_t>{1, 2, 3, 4}), boost::test_tools::per_element());  // truncated
  BOOST_TEST(ex[1].label == 1);
  ex[0].label = 0;
  const TrainingBatch b = make_batch(ex, 9);
  BOOST_TEST(b.batch == 2);
  BOOST_TEST(b.length == 4);
  BOOST_TEST(b.ids == (std::vector<int32_t>{5, 6, 7, 9, 1, 2, 3, 4}), boost::test_tools::per_element());
  BOOST_TEST(b.lengths == (std::vector<int64_t>{3, 4}), boost::test_tools::per_element());
  BOOST_TEST(b.labels == (std::vector<int32_t>{0, 1}), boost::test_tools::per_element());
  BOOST_TEST(b.tokens() == 7);
}

BOOST_AUTO_TEST_CASE(bad_examples_name_the_file_and_line) {
  TempDir dir;
  fails_with(write(dir, "{\"ids\": [1]}\nnot json\n"), "data.jsonl:2: not valid JSON");
  fails_with(write(dir, "[1, 2]\n"), "data.jsonl:1: an example must be a JSON object");
  fails_with(write(dir, "{\"text\": \"hello\"}\n"), "data.jsonl:1: \"text\" needs the model's tokenizer");
  fails_with(write(dir, "{\"ids\": []}\n"), "data.jsonl:1: the example has no tokens");
  fails_with(write(dir, "{\"label\": 1}\n"), "data.jsonl:1: an example needs \"text\" or \"ids\"");
  fails_with(write(dir, "{\"ids\": [\"a\"]}\n"), "data.jsonl:1:");
  fails_with(write(dir, "\n\n"), "no training examples");
  fails_with(dir.str() + "/missing.jsonl", "cannot open the training data");
  try {
    read_training_jsonl(write(dir, "{\"ids\": [1, 2, 3]}\n"), nullptr, 2, false);
    BOOST_FAIL("a long example was accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("3 tokens exceed the maximum of 2") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(batches_refuse_mixed_labels) {
  std::vector<TrainingExample> ex(2);
  ex[0].ids = {1};
  ex[1].ids = {2};
  ex[1].label = 1;
  BOOST_CHECK_THROW(make_batch(ex, 0), std::invalid_argument);
  BOOST_CHECK_THROW(make_batch({}, 0), std::invalid_argument);
}
