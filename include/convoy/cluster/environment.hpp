// Environment: where cluster resolution looks variables up. The process's own environment in a
// program, a plain map in tests, so that no test has to touch the real environment.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace convoy {

/// A read-only set of environment variables. An unset variable and a variable set to the empty
/// string read the same (`std::nullopt`): launchers never set a variable empty, and `export RANK=`
/// in a shell means "not given". Copyable; reading is thread-safe as long as nobody calls setenv.
class Environment {
 public:
  /// No variables at all.
  Environment() = default;

  /// Exactly these variables (for tests and for programs that build their own).
  Environment(std::map<std::string, std::string> vars) : vars_(std::move(vars)) {}

  /// The process's environment, read through `std::getenv` at each lookup.
  static Environment process() {
    Environment env;
    env.process_ = true;
    return env;
  }

  /// The value of `name`, or nullopt when it is unset or empty.
  std::optional<std::string> get(std::string const& name) const {
    if (process_) {
      char const* value = std::getenv(name.c_str());
      if (value == nullptr || *value == '\0') return std::nullopt;
      return std::string(value);
    }
    auto it = vars_.find(name);
    if (it == vars_.end() || it->second.empty()) return std::nullopt;
    return it->second;
  }

  /// True when `name` is set to a non-empty value.
  bool has(std::string const& name) const { return get(name).has_value(); }

 private:
  bool process_ = false;
  std::map<std::string, std::string> vars_;
};

}  // namespace convoy
