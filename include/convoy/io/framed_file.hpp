// Framed files: the 24-byte header (magic, version, payload length, CRC-32) that binary weights
// files and checkpoints start with, written while the payload streams and checked, in an order
// that names the real fault, before any parser sees the payload.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace convoy::io {

namespace detail {

// Binary files convoy writes (checkpoints, binary weights files) start with a 24-byte header: an
// 8-byte magic, a format version (uint32), the payload's length (uint64) and the payload's
// CRC-32 (uint32), all little-endian. A random, cut, damaged or foreign file is then refused by
// name with the reason, before a parser sees it.
inline constexpr std::size_t framed_header_size = 8 + 4 + 8 + 4;

// What one kind of framed file is: its magic (8 bytes), the version this build writes, its name in
// messages ("checkpoint"), and the oldest version it still reads (0: only its own).
struct FramedKind {
  std::string_view magic;
  std::uint32_t version;
  std::string_view noun;
  std::uint32_t oldest = 0;
};

inline std::uint32_t crc32_update(std::uint32_t crc, char const* data, std::size_t size) {
  // zlib's length is a uInt; feed it in pieces so payloads over 4 GiB are summed whole.
  while (size > 0) {
    auto const piece = static_cast<uInt>(std::min<std::size_t>(size, std::size_t{1} << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, reinterpret_cast<Bytef const*>(data), piece));
    data += piece;
    size -= piece;
  }
  return crc;
}

inline std::uint32_t crc32_empty() { return static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0)); }

template <class T>
void put_le(char* out, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

template <class T>
T get_le(char const* in) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

inline std::array<char, framed_header_size> framed_header(FramedKind const& kind,
                                                          std::uint64_t length, std::uint32_t crc) {
  std::array<char, framed_header_size> header{};
  std::memcpy(header.data(), kind.magic.data(), std::min<std::size_t>(kind.magic.size(), 8));
  put_le(header.data() + 8, kind.version);
  put_le(header.data() + 12, length);
  put_le(header.data() + 20, crc);
  return header;
}

// Passes bytes on to another stream buffer, counting them and summing their CRC-32, so the payload
// streams straight to the file instead of being held in memory to learn its length and checksum.
class ChecksumWriter : public std::streambuf {
 public:
  explicit ChecksumWriter(std::streambuf* sink) : sink_(sink) {}
  std::uint64_t size() const { return size_; }
  std::uint32_t crc() const { return crc_; }

 protected:
  std::streamsize xsputn(char const* data, std::streamsize count) override {
    std::streamsize const written = sink_->sputn(data, count);
    if (written > 0) {
      crc_ = crc32_update(crc_, data, static_cast<std::size_t>(written));
      size_ += static_cast<std::uint64_t>(written);
    }
    return written;
  }
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    char const c = traits_type::to_char_type(ch);
    return xsputn(&c, 1) == 1 ? ch : traits_type::eof();
  }

 private:
  std::streambuf* sink_;
  std::uint64_t size_ = 0;
  std::uint32_t crc_ = crc32_empty();
};

// Writes a header and the payload `write(std::ostream&)` produces to the seekable `out`. The
// length and CRC are known only after the payload: the header's place is reserved, the payload
// streams through the checksum, then the header is filled in.
template <class Write>
void write_framed(std::ostream& out, FramedKind const& kind, Write&& write) {
  auto header = framed_header(kind, 0, 0);
  auto const start = out.tellp();
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  ChecksumWriter summed(out.rdbuf());
  {
    std::ostream payload(&summed);
    std::forward<Write>(write)(payload);
    if (!payload) throw Error("convoy: writing a " + std::string(kind.noun) + " payload failed");
  }
  header = framed_header(kind, summed.size(), summed.crc());
  out.seekp(start);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.seekp(0, std::ios::end);
}

// A framed file whose header and checksum passed, positioned at its payload.
template <class Exception>
struct FramedFile {
  std::ifstream in;
  std::uint64_t end = 0;      // offset just past the payload: the file's size
  std::string where;          // "convoy: <noun> '<path>' ", to start messages
  std::uint32_t version = 0;  // the format version its header gave

  Exception fail(std::string const& why) const { return Exception(where + why); }

  // Throws when parsing stopped before the end: a checksum-valid payload that parses short was
  // written by another layout, so it is refused rather than guessed at.
  void require_consumed() {
    auto const at = in.tellg();
    auto const stop = at < 0 ? std::uint64_t{0} : static_cast<std::uint64_t>(at);
    if (stop != end) {
      throw fail("has a payload that cannot be parsed: " + std::to_string(end - stop) +
                 " bytes are left over");
    }
  }
};

// Checks `opened`, a stream on `file`, as a framed file of `kind`, in this order so each message
// names the real fault (a foreign file would otherwise be reported as truncated, a cut one as
// damaged): the magic, the header's length, the version, the payload's length against the file's,
// and the CRC-32 (reading the payload once; no copy is held). Throws `Exception` naming the file.
template <class Exception>
FramedFile<Exception> check_framed(std::ifstream opened, std::filesystem::path const& file,
                                   FramedKind const& kind) {
  FramedFile<Exception> framed{std::move(opened), 0,
                               "convoy: " + std::string(kind.noun) + " '" + file.string() + "' "};
  auto& in = framed.in;
  in.seekg(0, std::ios::end);
  auto const size = in.tellg();
  if (size < 0) throw framed.fail("cannot be read (it does not support seeking)");
  framed.end = static_cast<std::uint64_t>(size);
  in.seekg(0);
  std::array<char, framed_header_size> header{};
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  auto const got = static_cast<std::size_t>(in.gcount());

  std::size_t const magic_seen = std::min(got, kind.magic.size());
  if (std::string_view(header.data(), magic_seen) != kind.magic.substr(0, magic_seen)) {
    throw framed.fail("is not a convoy " + std::string(kind.noun) + " (it does not start with \"" +
                      std::string(kind.magic) + "\")");
  }
  if (got < header.size()) {
    throw framed.fail("is truncated: its header needs " + std::to_string(header.size()) +
                      " bytes, found " + std::to_string(got));
  }
  auto const version = get_le<std::uint32_t>(header.data() + 8);
  auto const oldest = kind.oldest > 0 ? kind.oldest : kind.version;
  if (version < oldest || version > kind.version) {
    throw framed.fail("has format version " + std::to_string(version) + ", this build reads " +
                      (oldest == kind.version ? "" : std::to_string(oldest) + " to ") +
                      std::to_string(kind.version));
  }
  framed.version = version;
  auto const length = get_le<std::uint64_t>(header.data() + 12);
  auto const stored_crc = get_le<std::uint32_t>(header.data() + 20);
  std::uint64_t const found = framed.end - header.size();
  if (found < length) {
    throw framed.fail("is truncated: the header promises " + std::to_string(length) +
                      " payload bytes, found " + std::to_string(found));
  }
  // Extra bytes mean the length field itself is wrong, so the payload boundary cannot be trusted.
  if (found > length) {
    throw framed.fail("is damaged: " + std::to_string(found - length) +
                      " unexpected bytes follow its payload of " + std::to_string(length));
  }

  std::uint32_t crc = crc32_empty();
  std::vector<char> buffer(std::size_t{1} << 20);
  for (std::uint64_t left = length; left > 0;) {
    auto const want = static_cast<std::size_t>(std::min<std::uint64_t>(left, buffer.size()));
    in.read(buffer.data(), static_cast<std::streamsize>(want));
    if (static_cast<std::size_t>(in.gcount()) != want) {
      throw framed.fail("could not be read to its end (did it change while being read?)");
    }
    crc = crc32_update(crc, buffer.data(), want);
    left -= want;
  }
  if (crc != stored_crc) {
    throw framed.fail("is damaged: checksum mismatch (the header says " +
                      std::to_string(stored_crc) + ", the payload sums to " + std::to_string(crc) +
                      ")");
  }
  in.clear();
  in.seekg(static_cast<std::streamoff>(header.size()));
  return framed;
}

}  // namespace detail

}  // namespace convoy::io
