// Weights files: tensors saved by variable name through cereal, as binary, portable binary or JSON,
// and checked name by name on load. Binary files carry a checksummed header; JSON is checked for
// nesting before it is parsed. Files are replaced atomically, so a crash while saving leaves the
// previous file whole. The pieces it builds on (files.hpp, framed_file.hpp, records.hpp,
// weights_format.hpp) are shared with the checkpoints, which need no JSON archive.
#pragma once

#include <array>
#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
#include <cstddef>
#include <filesystem>
#include <istream>
#include <iterator>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/detail/json_nesting.hpp"
#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"
// The pieces below were split out so that checkpoints and logs need not compile the JSON archive;
// this header still provides all of them.
#include "files.hpp"
#include "framed_file.hpp"
#include "records.hpp"
#include "weights_format.hpp"

namespace convoy::io {

// The functions here that use cereal's archives are templates (`template <class = void>`) only so
// that a file that never calls them never instantiates the archives for them: a non-template inline
// function instantiates what its body uses in every file that includes it (docs/compile_time.md).

namespace detail {

template <class = void>
void write_records(std::ostream& out, std::vector<RecordView> const& records, Format format) {
  // Each archive is scoped: JSON writes its closing brace only when destroyed.
  switch (format) {
    case Format::binary: {
      cereal::BinaryOutputArchive ar(out);
      save_records(ar, "tensors", records);
      break;
    }
    case Format::portable_binary: {
      cereal::PortableBinaryOutputArchive ar(out);
      save_records(ar, "tensors", records);
      break;
    }
    case Format::json: {
      cereal::JSONOutputArchive ar(out);
      save_records(ar, "tensors", records);
      break;
    }
  }
}

// Binary weights files: `binary` has its own magic apart from `portable_binary`'s, as each
// archive reads only what it wrote itself. JSON files stay plain text, without a header.
inline constexpr FramedKind binary_weights_kind{"CONVOYWB", 1, "binary weights file"};
inline constexpr FramedKind portable_weights_kind{"CONVOYWP", 1, "portable binary weights file"};

inline FramedKind const& weights_kind(Format format) {
  return format == Format::binary ? binary_weights_kind : portable_weights_kind;
}

// A weights file's bytes: for binary formats a header, then the records.
template <class = void>
void write_weights_file(std::ostream& out, std::vector<RecordView> const& records, Format format) {
  if (format == Format::json) {
    write_records(out, records, format);
  } else {
    write_framed(out, weights_kind(format),
                 [&](std::ostream& payload) { write_records(payload, records, format); });
  }
}

using convoy::detail::json_max_depth;
using convoy::detail::JsonNesting;

// Without the "convoy: <source>" prefix, which read_named() adds.
[[noreturn]] inline void json_too_deep() {
  throw LoadError("JSON arrays and objects nest more than " + std::to_string(json_max_depth) +
                  " levels deep; a weights file needs 4, so it is damaged or not one");
}

// Parses JSON records from `in` once their nesting is known to be within json_max_depth. A
// seekable stream is scanned and rewound; any other is read into memory first (cereal builds the
// whole document in memory anyway).
template <class = void>
void read_json_records(std::istream& in, std::map<std::string, Tensor>& named) {
  JsonNesting nesting;
  auto const start = in.tellg();
  if (start < 0) {
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!nesting.feed(text.data(), text.size())) json_too_deep();
    std::istringstream copy(std::move(text));
    cereal::JSONInputArchive ar(copy);
    load_records(ar, "tensors", named);
    return;
  }
  std::array<char, 1 << 16> block{};
  while (in.read(block.data(), block.size()) || in.gcount() > 0) {
    if (!nesting.feed(block.data(), static_cast<std::size_t>(in.gcount()))) json_too_deep();
  }
  in.clear();
  in.seekg(start);
  cereal::JSONInputArchive ar(in);
  load_records(ar, "tensors", named);
}

}  // namespace detail

/// Writes `named` to `out` as a sequence of NamedTensor records in `format`: the payload of a
/// weights file, without the header save_named() puts before binary formats. Blocks on the
/// stream. Throws cereal::Exception when the stream refuses bytes.
template <class = void>
void write_named(std::ostream& out, std::map<std::string, Tensor> const& named, Format format) {
  detail::write_records(out, detail::record_views(named), format);
}

/// Reads what write_named() wrote (no header). `what` names the source in messages (say
/// "'ckpt/w.bin'"). Blocks on the stream. Throws LoadError naming `what` when the bytes cannot be
/// parsed (truncated, garbage, another format, JSON nested deeper than 64 levels), when a record's
/// value count differs from its shape's, or when a name appears twice; never crashes on bad input.
/// JSON is scanned before it is parsed: a seekable stream is rewound, any other is held in memory.
template <class = void>
std::map<std::string, Tensor> read_named(std::istream& in, Format format, std::string const& what) {
  std::map<std::string, Tensor> named;
  try {
    switch (format) {
      case Format::binary: {
        cereal::BinaryInputArchive ar(in);
        detail::load_records(ar, "tensors", named);
        break;
      }
      case Format::portable_binary: {
        cereal::PortableBinaryInputArchive ar(in);
        detail::load_records(ar, "tensors", named);
        break;
      }
      case Format::json:
        detail::read_json_records(in, named);
        break;
    }
  } catch (LoadError const& e) {
    // Record errors are raised deep inside cereal, which does not know the source's name.
    throw LoadError("convoy: " + what + ": " + e.what());
  } catch (cereal::Exception const& e) {
    throw LoadError("convoy: " + what + " cannot be read as " + std::string(format_name(format)) +
                    " weights (cereal: " + e.what() + ")");
  }
  return named;
}

/// Writes `named` to `path` in `format`, atomically (see save_weights). Binary formats get a
/// 24-byte header: magic "CONVOYWB" (binary) or "CONVOYWP" (portable binary), format version 1,
/// payload length and CRC-32, little-endian; JSON is written plain. Blocks on file I/O. Throws
/// convoy::Error naming the path and the system's reason when it cannot be written.
template <class = void>
void save_named(std::filesystem::path const& path, std::map<std::string, Tensor> const& named,
                Format format) {
  auto const records = detail::record_views(named);
  detail::write_atomically(
      path, [&](std::ostream& out) { detail::write_weights_file(out, records, format); });
}

/// Reads a file written by save_named() or save_weights(). Blocks on file I/O (a binary file is
/// read twice: once for its checksum, once to parse). Throws convoy::Error naming the path when it
/// is missing, is not a regular file or cannot be opened; LoadError naming it when a binary file
/// is not a convoy weights file of that format, has another format version, is truncated, fails
/// its checksum or has bytes left over, or when the contents cannot be parsed (see read_named).
template <class = void>
std::map<std::string, Tensor> load_named(std::filesystem::path const& path, Format format) {
  auto in = detail::open_for_reading<Error>(path, "weights file");
  std::string const what = "'" + path.string() + "'";
  if (format == Format::json) return read_named(in, format, what);
  auto framed = detail::check_framed<LoadError>(std::move(in), path, detail::weights_kind(format));
  auto named = read_named(framed.in, format, what);
  framed.require_consumed();
  return named;
}

/// Saves every variable of `vars` by name to `path`, in `format` or else the one its extension
/// names (format_for); binary formats carry a header with a checksum (see save_named). The file is
/// replaced atomically: written to `<path>.tmp-<pid>`, synced, then
/// renamed, so a crash leaves the old file or the new one. Blocks on file I/O; `vars` must not be
/// written meanwhile. Throws convoy::Error for an unknown extension or when the file cannot be
/// written (naming the path and the system's reason).
template <class = void>
void save_weights(std::filesystem::path const& path, Variables const& vars,
                  std::optional<Format> format = {}) {
  Format const chosen = format ? *format : format_for(path);
  // Arenas in a device's memory (a replica on a GPU) are read through a host copy, by name.
  std::map<std::string, Tensor> staged;
  if (vars.arenas_on_device()) staged = vars.get_weights();
  auto const records =
      vars.arenas_on_device() ? detail::record_views(staged) : detail::record_views(vars);
  detail::write_atomically(
      path, [&](std::ostream& out) { detail::write_weights_file(out, records, chosen); });
}

/// Loads weights saved by save_weights() into `vars`, matching records to variables by name.
/// Blocks on file I/O. Throws convoy::Error when the file is missing or unreadable, and LoadError
/// naming the path when it is refused (see load_named) or when any name is unknown, missing or
/// mis-shaped (the message lists all of them). On any error `vars` is unchanged.
template <class = void>
void load_weights(std::filesystem::path const& path, Variables& vars,
                  std::optional<Format> format = {}) {
  Format const chosen = format ? *format : format_for(path);
  // Read the whole file before touching `vars`, so a bad file cannot leave it half loaded.
  auto const named = load_named(path, chosen);
  vars.check_names(named, "loading '" + path.string() + "'");
  vars.set_weights(named);
}

}  // namespace convoy::io
