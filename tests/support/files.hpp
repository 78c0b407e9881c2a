// Whole files as bytes, for the tests and the benchmarks that start processes (no doctest here).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace convoy::testing
