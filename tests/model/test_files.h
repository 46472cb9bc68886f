// Files for model tests: where the golden data is, and a temporary directory removed at scope exit.
#pragma once

#include <stdlib.h>  // mkdtemp

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hyla::testing {

/// tests/data, baked in at compile time (tests/CMakeLists.txt).
inline std::string test_data_dir() { return HYLA_TEST_DATA_DIR; }

/// The golden root: $HYLA_GOLDEN_DIR if set, else tests/data/golden.
inline std::string golden_dir() {
  const char* env = std::getenv("HYLA_GOLDEN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : str_cat(test_data_dir(), "/golden");
}

/// A fresh directory under the system temp directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hyla_model_test_XXXXXX");
    HYLA_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp(", pattern, ") failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  /// path()/name
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace hyla::testing
