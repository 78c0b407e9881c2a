// Whole files as bytes, for the tests and the benchmarks that start processes (no doctest here).
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace convoy::testing {

/// The whole file, or "" when it cannot be read. (Streaming an empty file's rdbuf() into a stream
/// instead sets failbit there, and whatever that stream is given next is lost.)
inline std::string read_file(std::filesystem::path const& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file(std::filesystem::path const& path, std::string const& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The files in `dir` whose names start with `prefix`, the least recently written first: the
/// per-process files of a task ("steps-worker1-"), in the order its processes started (each one
/// writes its own until it ends).
inline std::vector<std::filesystem::path> files_starting(std::filesystem::path const& dir,
                                                         std::string const& prefix) {
  std::vector<std::pair<std::filesystem::file_time_type, std::filesystem::path>> found;
  for (auto const& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(prefix)) {
      found.emplace_back(e.last_write_time(), e.path());
    }
  }
  std::ranges::sort(found);
  std::vector<std::filesystem::path> out;
  for (auto const& f : found) out.push_back(f.second);
  return out;
}

}  // namespace convoy::testing
