// A fresh directory under the system's temp dir (/tmp), removed with everything in it when the object dies.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace corolla::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("corolla-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace corolla::test
