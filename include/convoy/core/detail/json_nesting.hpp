// JsonNesting: how deep JSON arrays and objects nest, followed through text in any number of
// pieces before it is parsed. RapidJSON (cereal's, which convoy parses JSON with) recurses with no
// limit, so text of 200,000 '[' overflows the stack instead of failing; every reader of JSON that a
// user or a peer hands convoy (weights files, TF_CONFIG) checks the depth first.
#pragma once

#include <cstddef>

namespace convoy::detail {

/// Deepest nesting of JSON arrays and objects convoy reads: far above what its formats need (a
/// weights file nests 4 deep, TF_CONFIG 3).
inline constexpr std::size_t json_max_depth = 64;

/// Tracks nesting outside strings. It does not validate the JSON; the parser does that once the
/// depth is known safe.
struct JsonNesting {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;

  /// False as soon as nesting passes json_max_depth.
  bool feed(char const* text, std::size_t size) {
    for (std::size_t i = 0; i < size; ++i) {
      char const c = text[i];
      if (in_string) {
        if (escaped) {
          escaped = false;
        } else if (c == '\\') {
          escaped = true;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        if (++depth > json_max_depth) return false;
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      }
    }
    return true;
  }
};

}  // namespace convoy::detail
