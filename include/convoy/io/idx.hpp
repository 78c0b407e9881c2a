// read_idx(): the IDX format of MNIST and Fashion-MNIST (a big-endian header of magic, element
// type, dimension count and sizes, then the elements), gzip-compressed or plain. Only unsigned
// bytes (type 0x08) are supported; anything malformed is a DatasetError naming the file.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"

namespace convoy::io {

/// An IDX file's contents: its dimensions, outermost first, and its elements in row-major order
/// (data.size() is the product of shape).
struct IdxArray {
  std::vector<std::uint32_t> shape;
  std::vector<std::uint8_t> data;
};

namespace detail {

// The largest element count read_idx() accepts; a header promising more is taken to be damaged.
inline constexpr std::uint64_t idx_max_elements = std::uint64_t{1} << 32;

// Bytes per gzread() call: large enough that call overhead vanishes, small enough for its
// unsigned/int length and to grow the buffer gradually when a header lies about the size.
inline constexpr std::size_t idx_read_chunk = std::size_t{16} << 20;

// Up to this many bytes are reserved at once from the header's promise; beyond it the buffer grows
// as data actually arrives, so a damaged header on a small file cannot allocate gigabytes.
inline constexpr std::size_t idx_reserve_limit = std::size_t{256} << 20;

struct GzClose {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzClose>;

[[noreturn]] inline void idx_fail(std::filesystem::path const& path, std::string const& problem) {
  throw DatasetError("convoy: IDX file '" + path.string() + "': " + problem);
}

inline std::string hex_byte(unsigned value) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%02X", value & 0xFFu);
  return text;
}

inline std::string_view idx_type_name(unsigned code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "not an IDX type";
  }
}

// zlib's description of the stream's error state, or "" when there is none worth reporting.
// Z_BUF_ERROR only means the compressed stream ended early; the caller reports that as truncation.
inline std::string gz_problem(gzFile_s* file, std::filesystem::path const& path) {
  int code = Z_OK;
  char const* message = gzerror(file, &code);
  if (code == Z_OK || code == Z_BUF_ERROR) return {};
  if (code == Z_ERRNO) return std::string("read error: ") + std::strerror(errno);
  std::string text = message ? message : "zlib error " + std::to_string(code);
  // zlib prefixes the path, which the caller's message already names.
  if (std::string const prefix = path.string() + ": "; text.starts_with(prefix))
    text.erase(0, prefix.size());
  return "damaged compressed data (" + text + ")";
}

// Reads up to `size` bytes; returns how many arrived (fewer only at the end of the data). Throws on
// a read error or damaged compressed data.
inline std::size_t gz_read_fully(gzFile_s* file, std::uint8_t* out, std::size_t size,
                                 std::filesystem::path const& path) {
  std::size_t done = 0;
  while (done < size) {
    auto const want = static_cast<unsigned>(std::min(size - done, idx_read_chunk));
    int const got = gzread(file, out + done, want);
    if (got > 0) done += static_cast<std::size_t>(got);
    if (got < 0 || static_cast<unsigned>(got) < want) {
      // A short read is either the end of the data or an error zlib reports only now.
      if (auto problem = gz_problem(file, path); !problem.empty()) {
        idx_fail(path, problem);
      }
      if (got < 0) idx_fail(path, "read failed");
      break;
    }
  }
  return done;
}

}  // namespace detail

/// Reads the IDX file at `path`, gzip-compressed or plain (zlib reads either). Blocks on file I/O;
/// safe to call from several threads on different files.
/// Throws DatasetError, naming the file, when it is absent or unreadable, the magic is wrong, the
/// element type is not 0x08 (unsigned byte), the sizes multiply to more than 2^32 elements, the
/// data is shorter than the header promises (expected vs found bytes) or longer, or the compressed
/// stream is damaged.
inline IdxArray read_idx(std::filesystem::path const& path) {
  namespace fs = std::filesystem;
  std::error_code status_error;
  auto const status = fs::status(path, status_error);
  if (status.type() == fs::file_type::not_found) detail::idx_fail(path, "no such file");
  if (status_error) detail::idx_fail(path, "cannot access: " + status_error.message());
  if (fs::is_directory(status)) detail::idx_fail(path, "is a directory, not a file");

  errno = 0;
  detail::GzHandle file{gzopen(path.string().c_str(), "rb")};
  if (!file) {
    detail::idx_fail(
        path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file.get(), 1u << 17);  // zlib's 8 KiB default makes many small reads of the source

  std::uint8_t magic[4] = {};
  if (detail::gz_read_fully(file.get(), magic, 4, path) < 4) {
    detail::idx_fail(path, "too short for an IDX header (fewer than 4 bytes)");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    detail::idx_fail(
        path, "bad magic " + detail::hex_byte(magic[0]) + " " + detail::hex_byte(magic[1]) + " " +
                  detail::hex_byte(magic[2]) + " " + detail::hex_byte(magic[3]) +
                  "; an IDX file starts with two zero bytes, a type byte and a dimension count");
  }
  if (magic[2] != 0x08) {
    detail::idx_fail(path, "unsupported element type " + detail::hex_byte(magic[2]) + " (" +
                               std::string(detail::idx_type_name(magic[2])) +
                               "); only 0x08 (unsigned byte) is supported");
  }

  std::size_t const dims = magic[3];
  std::vector<std::uint8_t> sizes(4 * dims);
  if (std::size_t const got = detail::gz_read_fully(file.get(), sizes.data(), sizes.size(), path);
      got < sizes.size()) {
    detail::idx_fail(path, "header truncated: " + std::to_string(dims) + " dimensions need " +
                               std::to_string(sizes.size()) + " bytes of sizes, found " +
                               std::to_string(got));
  }

  IdxArray out;
  out.shape.resize(dims);
  std::uint64_t elements = 1;
  for (std::size_t d = 0; d < dims; ++d) {
    std::uint8_t const* b = sizes.data() + 4 * d;
    out.shape[d] = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                   (std::uint32_t{b[2]} << 8) | b[3];
    // elements <= 2^32 and a size < 2^32 keep the product below 2^64: no overflow before the test.
    elements *= out.shape[d];
    if (elements > detail::idx_max_elements) {
      std::string shape_text;
      for (std::size_t k = 0; k <= d; ++k)
        shape_text += (k ? " x " : "") + std::to_string(out.shape[k]);
      detail::idx_fail(path, "sizes " + shape_text + (d + 1 < dims ? " x ..." : "") +
                                 " exceed 2^32 elements; the header is damaged");
    }
  }
  if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
    if (elements > std::numeric_limits<std::size_t>::max()) {
      detail::idx_fail(
          path, std::to_string(elements) + " elements do not fit in memory on this platform");
    }
  }

  // Grow with the data actually read rather than trusting the header with one huge allocation.
  auto const expected = static_cast<std::size_t>(elements);
  out.data.reserve(std::min(expected, detail::idx_reserve_limit));
  std::size_t found = 0;
  while (found < expected) {
    std::size_t const want = std::min(expected - found, detail::idx_read_chunk);
    out.data.resize(found + want);
    std::size_t const got = detail::gz_read_fully(file.get(), out.data.data() + found, want, path);
    found += got;
    if (got < want) break;
  }
  if (found < expected) {
    detail::idx_fail(path, "data truncated: the header promises " + std::to_string(expected) +
                               " bytes, found " + std::to_string(found));
  }
  // Reading one byte past the end also makes zlib check the gzip trailer (CRC and length).
  std::uint8_t extra = 0;
  if (detail::gz_read_fully(file.get(), &extra, 1, path) != 0) {
    detail::idx_fail(path, "longer than its header says (" + std::to_string(expected) +
                               " bytes of data); the sizes are wrong or the file is not IDX");
  }
  if (int code = Z_OK; gzerror(file.get(), &code) && code == Z_BUF_ERROR) {
    detail::idx_fail(path, "compressed stream truncated after all " + std::to_string(expected) +
                               " bytes of data (the gzip trailer is cut)");
  }
  return out;
}

}  // namespace convoy::io
