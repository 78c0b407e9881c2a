// A fresh directory per test under $CONVOY_TEST_TMP (set by ctest) or the system temp dir; removed
// when the test ends unless CONVOY_KEEP_TMP is set.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace convoy::testing {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(std::string const& stem) {
    char const* root = std::getenv("CONVOY_TEST_TMP");
    std::filesystem::path base = root ? root : std::filesystem::temp_directory_path();
    path = base / (stem + "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    if (!std::getenv("CONVOY_KEEP_TMP")) {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  }
  TempDir(TempDir const&) = delete;
  TempDir& operator=(TempDir const&) = delete;
  std::filesystem::path operator/(std::string const& name) const { return path / name; }
};

}  // namespace convoy::testing
