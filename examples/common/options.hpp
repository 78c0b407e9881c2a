// Strict command-line parsing for the examples: every value is read whole (std::from_chars, no
// sign, space or trailing text tolerated) and range-checked, and every path is checked before any
// work starts. A bad option throws UsageError, whose one-line message names the option and the
// value; main() prints it and exits with status 2.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace examples {

/// A command-line mistake: exit status 2, as for any Unix tool's usage error.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Throws UsageError "OPTION 'VALUE': WHY".
[[noreturn]] inline void bad_value(std::string_view option, std::string_view value,
                                   std::string_view why) {
  throw UsageError(std::string(option) + " '" + std::string(value) + "': " + std::string(why));
}

/// The whole of `text` as an integer in [min, max]; otherwise UsageError saying `expected`.
/// "-1" for a count is an error here, where std::stoul would wrap it to 2^64 - 1.
template <class T>
T parse_integer(std::string_view option, std::string_view text, T min, T max,
                std::string_view expected) {
  T value{};
  char const* const end = text.data() + text.size();
  auto const [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc{} || stop != end || value < min || value > max) {
    bad_value(option, text, expected);
  }
  return value;
}

/// The whole of `text` as a finite real number accepted by `ok`; otherwise UsageError saying
/// `expected`. NaN and infinities are refused whatever `ok` says.
template <class Ok>
double parse_real(std::string_view option, std::string_view text, Ok ok,
                  std::string_view expected) {
  double value = 0.0;
  char const* const end = text.data() + text.size();
  auto const [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc{} || stop != end || !std::isfinite(value) || !ok(value)) {
    bad_value(option, text, expected);
  }
  return value;
}

namespace detail {

// True when a file can be created in the directory `dir`: tried for real (and removed), since
// permission bits say nothing about read-only mounts, /proc, or root.
inline bool can_create_file_in(std::filesystem::path const& dir) {
  std::string name = (dir / ".convoy-probe-XXXXXX").string();
  int const fd = ::mkstemp(name.data());
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(name.c_str());
  return true;
}

}  // namespace detail

/// Checks that `dir` is a directory this process can read.
inline void require_readable_dir(std::string_view option, std::string const& dir) {
  if (dir.empty()) bad_value(option, dir, "expected a directory");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) bad_value(option, dir, "no such directory");
  if (::access(dir.c_str(), R_OK | X_OK) != 0) bad_value(option, dir, "directory is not readable");
}

/// Checks that `dir` is, or can be created as, a directory this process can write in: it exists
/// as a writable directory, or its nearest existing ancestor is one.
inline void require_writable_dir(std::string_view option, std::string const& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) bad_value(option, dir, "expected a directory");
  std::error_code ec;
  fs::path existing = fs::absolute(dir, ec);
  if (ec) bad_value(option, dir, "cannot resolve the path: " + ec.message());
  while (!fs::exists(existing, ec) && existing.has_relative_path()) {
    existing = existing.parent_path();
  }
  if (!fs::is_directory(existing, ec)) {
    bad_value(option, dir, "'" + existing.string() + "' is not a directory");
  }
  if (!detail::can_create_file_in(existing)) {
    bad_value(option, dir, "cannot write in '" + existing.string() + "'");
  }
}

/// Checks that `file` can be written: its extension is one of `extensions`, it is not a
/// directory, and its directory exists and is writable.
inline void require_writable_file(std::string_view option, std::string const& file,
                                  std::initializer_list<std::string_view> extensions) {
  namespace fs = std::filesystem;
  fs::path const path(file);
  bool known = false;
  std::string names;
  for (auto const extension : extensions) {
    known = known || path.extension() == extension;
    names += (names.empty() ? "" : ", ") + std::string(extension);
  }
  if (!known) bad_value(option, file, "expected a file name ending in " + names);
  std::error_code ec;
  if (fs::is_directory(path, ec)) bad_value(option, file, "is a directory");
  fs::path const dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(dir, ec)) {
    bad_value(option, file, "directory '" + dir.string() + "' does not exist");
  }
  if (!detail::can_create_file_in(dir)) {
    bad_value(option, file, "cannot write in '" + dir.string() + "'");
  }
}

}  // namespace examples
