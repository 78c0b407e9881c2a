// io::Format: the archives a weights file can be written with, and the one a file name asks for.
// Apart from the archives themselves, so that code which only names a format (checks a path,
// passes a Format on) does not compile cereal.
#pragma once

#include <filesystem>
#include <string_view>

#include "../core/error.hpp"

namespace convoy::io {

/// The archive a weights file is written with. `binary` is the fastest but reads back only on a
/// machine of the same endianness; `portable_binary` reads anywhere; `json` is for people.
enum class Format { binary, portable_binary, json };

/// "binary", "portable binary" or "JSON", for messages.
inline std::string_view format_name(Format format) {
  switch (format) {
    case Format::binary:
      return "binary";
    case Format::portable_binary:
      return "portable binary";
    case Format::json:
      return "JSON";
  }
  return "unknown";
}

/// The format a file name asks for: ".bin", ".pbin" or ".json". Throws convoy::Error naming the
/// path and the three extensions for anything else. Does not touch the file system.
inline Format format_for(std::filesystem::path const& path) {
  auto const ext = path.extension();
  if (ext == ".bin") return Format::binary;
  if (ext == ".pbin") return Format::portable_binary;
  if (ext == ".json") return Format::json;
  throw Error("convoy: cannot tell the weights format of '" + path.string() +
              "'; name it *.bin (binary), *.pbin (portable binary) or *.json (JSON), or pass a "
              "convoy::io::Format (LibTorch's *.pt: libtorch::save_weights in "
              "<convoy/torch/trained_weights.hpp>)");
}

}  // namespace convoy::io
