// Text helpers for cluster messages: quoting, joining, reading integers, and the closest known
// name to a misspelt one. Not for users.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../../core/error.hpp"

namespace convoy::detail {

/// `text` between double quotes, as messages quote every offending part.
inline std::string quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char const c : text) {
    // A control byte is shown, not sent: a NUL would end the message where C strings read it.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "\\x%02x",
                    static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += code;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

/// The parts joined by `separator`.
inline std::string join(std::vector<std::string> const& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

/// Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
/// neighbours each count 1, so "wroker" is 1 away from "worker".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t const cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

/// The candidate within distance 2 of `name` (and nearer than the shorter one's length, so "x" is
/// not taken for "ps"), the nearest if several; nullopt when none is that close.
inline std::optional<std::string> closest(std::string_view name,
                                          std::vector<std::string> const& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 3;
  for (auto const& candidate : candidates) {
    std::size_t const distance = edit_distance(name, candidate);
    if (distance < best_distance && distance < std::min(name.size(), candidate.size())) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

/// "; did you mean "x"?" when a candidate is close to `name`, else "".
inline std::string did_you_mean(std::string_view name, std::vector<std::string> const& candidates) {
  auto const near = closest(name, candidates);
  return near ? "; did you mean " + quote(*near) + "?" : std::string();
}

/// `text` as a non-negative decimal integer that fits in int (digits only: no sign, no spaces),
/// or nullopt.
inline std::optional<int> parse_count(std::string_view text) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int value = 0;
  auto const [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// `text` as a non-negative integer; throws ClusterError naming `source` (a variable or a flag)
/// and quoting `text` otherwise.
inline int require_count(std::string_view text, std::string_view source) {
  auto const value = parse_count(text);
  if (!value) {
    throw ClusterError("convoy: " + std::string(source) + " is " + quote(text) +
                       ", which is not a non-negative integer");
  }
  return *value;
}

}  // namespace convoy::detail
