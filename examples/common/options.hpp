// Strict command-line parsing for the examples: every value is read whole (std::from_chars, no
// sign, space or trailing text tolerated) and range-checked, and every path is checked before any
// work starts. A bad option throws UsageError, whose one-line message names the option and the
// value; main() prints it and exits with status 2.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <convoy/core/error.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
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

/// Checks that `dir` is a directory this process can read.
inline void require_readable_dir(std::string_view option, std::string const& dir) {
  if (dir.empty()) bad_value(option, dir, "expected a directory");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (ec.value() == ELOOP) bad_value(option, dir, "a symbolic link loop, not a directory");
    bad_value(option, dir, ec ? "cannot be examined: " + ec.message() : "no such directory");
  }
  if (::access(dir.c_str(), R_OK | X_OK) != 0) bad_value(option, dir, "directory is not readable");
}

/// Runs a check of the library's (io::require_writable_directory, io::require_writable_file) on an
/// option's value; its convoy::Error becomes this option's usage error.
template <class Check>
void require(std::string_view option, std::string const& value, Check&& check) {
  try {
    check();
  } catch (convoy::Error const& e) {
    bad_value(option, value, e.what());
  }
}

/// Reads `--flag value` pairs: `--help` prints `usage` and exits with status 0; every other flag
/// and its value go to `take(flag, value)`, which returns false for a flag it does not know. A
/// flag without its value or an unknown flag throws UsageError.
template <class Take>
void parse_flags(int argc, char** argv, std::string_view usage, Take&& take) {
  for (int i = 1; i < argc; ++i) {
    std::string_view const flag = argv[i];
    if (flag == "--help") {
      std::cout << usage;
      std::exit(0);
    }
    if (i + 1 == argc) throw UsageError(std::string(flag) + " needs a value");
    if (!take(flag, std::string_view(argv[++i]))) {
      throw UsageError("unknown option '" + std::string(flag) + "'");
    }
  }
}

/// An example's main(): runs `body` and returns its status; a UsageError is one line
/// "PROGRAM: what" on stderr and status 2, any other error one line and status 1.
template <class Body>
int run_main(std::string_view program, Body&& body) {
  try {
    return body();
  } catch (UsageError const& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 2;
  } catch (std::exception const& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

}  // namespace examples
