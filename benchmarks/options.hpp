// The command line every benchmark shares: --help, typed options that refuse malformed values, and
// the --csv / --json result files (written by report.hpp). A bad option ends the program with one
// line on stderr naming it and exit status 2, so scripts can tell a typo from a failed run (1).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace convoy::bench {

/// Declares a benchmark's options, then parses argv once. Not thread-safe; use from main only.
class CommandLine {
 public:
  /// `program` names the benchmark in messages; `summary` is the usage's first line after it.
  CommandLine(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {
    option("--csv", "PATH", "also write the results as CSV (one row per record, header first)",
           [this](std::string_view v) { return assign_path(csv_path_, v); });
    option("--json", "PATH", "also write the results as JSON lines (the lines printed on stdout)",
           [this](std::string_view v) { return assign_path(json_path_, v); });
  }

  /// An option without a value: sets `target` to true when given.
  void flag(std::string name, bool& target, std::string help) {
    options_.push_back({std::move(name), "", std::move(help), [&target](std::string_view) {
                          target = true;
                          return std::string();
                        }});
  }

  /// An option with a value; `accept` stores it, or returns what a well-formed one looks like
  /// ("a whole number >= 1") when it is malformed, and then stores nothing.
  void option(std::string name, std::string metavar, std::string help,
              std::function<std::string(std::string_view)> accept) {
    options_.push_back({std::move(name), std::move(metavar), std::move(help), std::move(accept)});
  }

  /// An integer option no smaller than `minimum`; anything else is malformed.
  template <class Int>
  void integer(std::string name, std::string metavar, Int& target, Int minimum, std::string help) {
    option(std::move(name), std::move(metavar), std::move(help),
           [&target, minimum](std::string_view v) {
             Int parsed{};
             auto const [end, error] = std::from_chars(v.data(), v.data() + v.size(), parsed);
             if (error != std::errc{} || end != v.data() + v.size() || parsed < minimum) {
               return "a whole number >= " + std::to_string(minimum);
             }
             target = parsed;
             return std::string();
           });
  }

  /// Parses argv. Returns nothing when the benchmark should run, or the status main should return:
  /// 0 after --help (usage on stdout), 2 after an unknown option, a missing value or a malformed
  /// one (one line on stderr that names the option).
  std::optional<int> parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string_view const arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(usage().c_str(), stdout);
        return 0;
      }
      auto const* o = find(arg);
      if (!o) return refuse("unknown option '" + std::string(arg) + "'");
      if (o->metavar.empty()) {
        o->accept({});
        continue;
      }
      if (i + 1 >= argc) return refuse(o->name + " needs a value (" + o->name + " " + o->metavar + ")");
      std::string_view const value = argv[++i];
      if (auto const expected = o->accept(value); !expected.empty()) {
        return refuse(o->name + " " + o->metavar + ": '" + std::string(value) + "' is not " +
                      expected);
      }
    }
    return std::nullopt;
  }

  /// The usage text --help prints: one line per option.
  std::string usage() const {
    std::string text = "usage: " + program_ + " [options]\n" + summary_ + "\n\noptions:\n";
    for (auto const& o : options_) {
      std::string left = "  " + o.name + (o.metavar.empty() ? "" : " " + o.metavar);
      left.resize(std::max<std::size_t>(left.size() + 2, 24), ' ');
      text += left + o.help + "\n";
    }
    text += "  --help                show this text and exit\n";
    return text;
  }

  std::string const& program() const { return program_; }
  std::string const& csv_path() const { return csv_path_; }
  std::string const& json_path() const { return json_path_; }

 private:
  struct Option {
    std::string name, metavar, help;
    std::function<std::string(std::string_view)> accept;  // "" or what a good value looks like
  };

  Option const* find(std::string_view name) const {
    for (auto const& o : options_) {
      if (o.name == name) return &o;
    }
    return nullptr;
  }

  int refuse(std::string const& what) const {
    std::fprintf(stderr, "%s: %s; see %s --help\n", program_.c_str(), what.c_str(),
                 program_.c_str());
    return 2;
  }

  static std::string assign_path(std::string& target, std::string_view v) {
    // "--x" is a forgotten PATH followed by the next option, not a file named "--x".
    if (v.empty() || v.starts_with("--")) return "a file path";
    target = v;
    return {};
  }

  std::string program_, summary_;
  std::vector<Option> options_;
  std::string csv_path_, json_path_;
};

}  // namespace convoy::bench
