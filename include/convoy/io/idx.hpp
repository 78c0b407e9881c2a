// read_idx(): the IDX format of MNIST and Fashion-MNIST (a big-endian header of magic, element
// type, dimension count and sizes, then the elements), gzip-compressed or plain. Only unsigned
// bytes (type 0x08) are supported; anything malformed is a DatasetError naming the file.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
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

// The most elements read_idx() accepts whatever its caller allows: a header promising more is
// taken to be damaged.
inline constexpr std::uint64_t idx_max_elements = std::uint64_t{1} << 32;

// Bytes of data read (and allocated) per step: large enough that call overhead vanishes, small
// enough that a header lying about the size costs at most this much memory beyond the data that
// actually arrived.
inline constexpr std::size_t idx_read_chunk = std::size_t{16} << 20;

// Compressed bytes read from the file per read(2).
inline constexpr std::size_t idx_input_block = std::size_t{128} << 10;

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

inline std::string_view file_type_name(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    case std::filesystem::file_type::character:
      return "a character device";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::directory:
      return "a directory";
    default:
      return "of an unknown type";
  }
}

inline std::filesystem::file_type file_type_of(mode_t mode) {
  using std::filesystem::file_type;
  if (S_ISREG(mode)) return file_type::regular;
  if (S_ISDIR(mode)) return file_type::directory;
  if (S_ISFIFO(mode)) return file_type::fifo;
  if (S_ISSOCK(mode)) return file_type::socket;
  if (S_ISCHR(mode)) return file_type::character;
  if (S_ISBLK(mode)) return file_type::block;
  return file_type::unknown;
}

[[noreturn]] inline void idx_not_regular(std::filesystem::path const& path,
                                         std::filesystem::file_type type) {
  idx_fail(path, "is " + std::string(file_type_name(type)) +
                     ", not a regular file; only regular files are read (a FIFO, socket or "
                     "device could block or never end)");
}

// The decompressed bytes of a regular file, gzip-compressed (one or more members) or plain. zlib's
// gzread() is not used: when one call fills a large buffer it stops at the last data byte, having
// swallowed what is left of a cut trailer, and the next call reports a clean end of file; so a
// file missing up to 8 bytes passes. Driving inflate() here, the data counts as complete only
// when inflate() has returned Z_STREAM_END, i.e. has checked the trailer's CRC-32 and length.
class IdxSource {
 public:
  explicit IdxSource(std::filesystem::path const& path) : path_(path) {
    namespace fs = std::filesystem;
    // Refuse anything but a regular file before opening it: opening a FIFO blocks until a writer
    // appears, and a device may never end.
    std::error_code ec;
    auto const status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found) idx_fail(path, "no such file");
    if (ec) idx_fail(path, "cannot access: " + ec.message());
    if (status.type() != fs::file_type::regular) idx_not_regular(path, status.type());

    // O_NONBLOCK keeps even a FIFO swapped in after the check from blocking the open; fstat then
    // judges the file actually opened.
    fd_.value = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd_.value < 0) system_fail("cannot open");
    struct stat opened {};
    if (::fstat(fd_.value, &opened) != 0) system_fail("cannot stat");
    if (!S_ISREG(opened.st_mode)) idx_not_regular(path, file_type_of(opened.st_mode));
    ::fcntl(fd_.value, F_SETFL, ::fcntl(fd_.value, F_GETFL) & ~O_NONBLOCK);

    input_.resize(idx_input_block);
    while (available_ < 2 && fill()) {
    }
    gzip_ = available_ >= 2 && input_[begin_] == 0x1F && input_[begin_ + 1] == 0x8B;
    if (gzip_) {
      // 16 + MAX_WBITS: a gzip wrapper only; inflate() then checks the trailer itself.
      if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) idx_fail(path, "zlib cannot start");
      inflating_ = true;
    }
  }
  ~IdxSource() {
    if (inflating_) inflateEnd(&stream_);
  }
  IdxSource(IdxSource const&) = delete;
  IdxSource& operator=(IdxSource const&) = delete;

  // Reads up to `size` bytes of data into `out`; fewer only at the end of the data, which for a
  // gzip file means a complete, checked stream. Throws DatasetError on a read error or on damaged
  // or cut compressed data.
  std::size_t read(std::uint8_t* out, std::size_t size) {
    return gzip_ ? inflate_into(out, size) : copy_into(out, size);
  }

 private:
  // Appends file bytes to the input buffer; false at the end of the file.
  bool fill() {
    if (begin_ > 0) {
      std::memmove(input_.data(), input_.data() + begin_, available_);
      begin_ = 0;
    }
    if (available_ == input_.size()) return true;
    for (;;) {
      ssize_t const got = ::read(fd_.value, input_.data() + available_, input_.size() - available_);
      if (got > 0) {
        available_ += static_cast<std::size_t>(got);
        return true;
      }
      if (got == 0) return false;
      if (errno != EINTR) system_fail("read error");
    }
  }

  std::size_t copy_into(std::uint8_t* out, std::size_t size) {
    std::size_t done = 0;
    while (done < size) {
      if (available_ == 0 && !fill()) break;
      std::size_t const take = std::min(available_, size - done);
      std::memcpy(out + done, input_.data() + begin_, take);
      begin_ += take;
      available_ -= take;
      done += take;
    }
    produced_ += done;
    return done;
  }

  std::size_t inflate_into(std::uint8_t* out, std::size_t size) {
    std::size_t done = 0;
    while (done < size) {
      if (member_ended_) {
        // A gzip file may hold several members one after another; anything else after the end of
        // one is damage, which inflate() reports as a bad header.
        if (available_ == 0 && !fill()) break;
        inflateReset(&stream_);
        member_ended_ = false;
      }
      if (available_ == 0 && !fill()) {
        idx_fail(path_, "compressed stream truncated after " + std::to_string(produced_ + done) +
                            " bytes of data (the gzip data or its trailer is cut)");
      }
      auto const in_size = static_cast<uInt>(std::min<std::size_t>(available_, UINT_MAX));
      auto const out_size = static_cast<uInt>(std::min<std::size_t>(size - done, UINT_MAX));
      stream_.next_in = input_.data() + begin_;
      stream_.avail_in = in_size;
      stream_.next_out = out + done;
      stream_.avail_out = out_size;
      int const rc = ::inflate(&stream_, Z_NO_FLUSH);
      begin_ += in_size - stream_.avail_in;
      available_ -= in_size - stream_.avail_in;
      done += out_size - stream_.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && available_ == 0)) {
        std::string const why = stream_.msg ? stream_.msg : "zlib error " + std::to_string(rc);
        idx_fail(path_, "damaged compressed data (" + why + ")");
      }
    }
    produced_ += done;
    return done;
  }

  // Closes the file however the constructor or a read ends.
  struct Fd {
    int value = -1;
    Fd() = default;
    Fd(Fd const&) = delete;
    Fd& operator=(Fd const&) = delete;
    ~Fd() {
      if (value >= 0) ::close(value);
    }
  };

  [[noreturn]] void system_fail(char const* what) const {
    int const err = errno;  // before anything else can change it
    idx_fail(path_, std::string(what) + ": " + std::strerror(err));
  }

  std::filesystem::path path_;
  Fd fd_;
  std::vector<std::uint8_t> input_;
  std::size_t begin_ = 0;      // first unused byte of input_
  std::size_t available_ = 0;  // unused bytes from begin_
  bool gzip_ = false;
  bool inflating_ = false;
  bool member_ended_ = false;
  std::uint64_t produced_ = 0;  // data bytes returned so far, for messages
  z_stream stream_{};
};

}  // namespace detail

/// Reads the IDX file at `path`, gzip-compressed (one or more members) or plain, holding at most
/// `max_elements` elements: the caller states what it expects (say 60,000 x 784 for Fashion-MNIST
/// training images), and values above 2^32 count as 2^32. Memory grows only with data actually
/// read (at most one 16 MiB chunk ahead), whatever the header promises. Blocks on file I/O; safe
/// to call from several threads on different files.
/// Throws DatasetError, naming the file, when it is absent, is not a regular file (a FIFO, socket
/// or device is refused before it is opened), is unreadable, the magic is wrong, the element type
/// is not 0x08 (unsigned byte), the sizes promise more than `max_elements` elements, the data is
/// shorter than the header promises (expected vs found bytes) or longer, or the compressed stream
/// is damaged or cut anywhere, its gzip trailer included.
inline IdxArray read_idx(std::filesystem::path const& path, std::uint64_t max_elements) {
  detail::IdxSource source(path);

  std::uint8_t magic[4] = {};
  if (source.read(magic, 4) < 4) {
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
  if (std::size_t const got = source.read(sizes.data(), sizes.size()); got < sizes.size()) {
    detail::idx_fail(path, "header truncated: " + std::to_string(dims) + " dimensions need " +
                               std::to_string(sizes.size()) + " bytes of sizes, found " +
                               std::to_string(got));
  }

  IdxArray out;
  out.shape.resize(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    std::uint8_t const* b = sizes.data() + 4 * d;
    out.shape[d] = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                   (std::uint32_t{b[2]} << 8) | b[3];
  }
  std::uint64_t const cap = std::min(max_elements, detail::idx_max_elements);
  std::uint64_t elements = 1;
  for (std::uint32_t size : out.shape) {
    // elements <= cap <= 2^32 and size < 2^32 keep the product below 2^64.
    elements = elements * size;
    if (elements <= cap) continue;
    std::string shape_text;
    for (std::size_t k = 0; k < dims; ++k)
      shape_text += (k ? " x " : "") + std::to_string(out.shape[k]);
    detail::idx_fail(path, "the header's sizes " + shape_text + " promise more than the " +
                               std::to_string(cap) +
                               " elements expected; the header is damaged or this is not the "
                               "file expected");
  }
  if constexpr (sizeof(std::size_t) < sizeof(std::uint64_t)) {
    if (elements > std::numeric_limits<std::size_t>::max()) {
      detail::idx_fail(
          path, std::to_string(elements) + " elements do not fit in memory on this platform");
    }
  }

  // Chunk by chunk, each allocated only when the one before arrived whole: the header's promise
  // never sizes an allocation, so a lying header on a small file cannot take gigabytes.
  auto const expected = static_cast<std::size_t>(elements);
  std::vector<std::vector<std::uint8_t>> chunks;
  std::size_t found = 0;
  while (found < expected) {
    std::size_t const want = std::min(expected - found, detail::idx_read_chunk);
    auto& chunk = chunks.emplace_back(want);
    std::size_t const got = source.read(chunk.data(), want);
    found += got;
    if (got < want) break;
  }
  if (found < expected) {
    detail::idx_fail(path, "data truncated: the header promises " + std::to_string(expected) +
                               " bytes, found " + std::to_string(found));
  }
  // One more byte proves the data ends here; for gzip it also makes inflate() check the trailer.
  std::uint8_t extra = 0;
  if (source.read(&extra, 1) != 0) {
    detail::idx_fail(path, "longer than its header says (" + std::to_string(expected) +
                               " bytes of data); the sizes are wrong or the file is not IDX");
  }
  if (chunks.size() == 1) {
    out.data = std::move(chunks.front());
  } else {
    out.data.reserve(expected);
    for (auto const& chunk : chunks) out.data.insert(out.data.end(), chunk.begin(), chunk.end());
  }
  return out;
}

}  // namespace convoy::io
