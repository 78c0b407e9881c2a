// Weights files: tensors saved by variable name through cereal, as binary, portable binary or JSON,
// and checked name by name on load. Binary files carry a checksummed header; JSON is checked for
// nesting before it is parsed. Files are replaced atomically, so a crash while saving leaves the
// previous file whole. The record, header and file pieces here are reused by checkpoint.hpp.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cereal/archives/binary.hpp>
#include <cereal/archives/json.hpp>
#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"

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
              "convoy::io::Format");
}

namespace detail {

// Proves `dir` accepts new files by creating and removing one; `where` starts the message.
inline void probe_directory(std::filesystem::path const& dir, std::string const& where) {
  static std::atomic<unsigned> probes{0};
  auto const probe = dir / (".convoy-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(probes.fetch_add(1)));
  int const fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0) {
    int const err = errno;
    throw Error(where + " is not writable: cannot create a file in it (" +
                std::generic_category().message(err) + ")");
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    int const err = errno;
    throw Error(where + " is not usable: cannot remove the file '" + probe.string() +
                "' created to test it (" + std::generic_category().message(err) + ")");
  }
}

}  // namespace detail

/// Makes sure files can be written into `dir` before work that ends by writing there: creates it
/// (with its parents) when missing, then creates and removes a probe file in it. `what` names the
/// directory's role in messages ("checkpoint directory"). Blocks on file I/O; safe to call from
/// several threads. Throws convoy::Error naming `what`, the path and the system's reason when it
/// cannot be created, is not a directory, or refuses the probe file.
inline void require_writable_directory(std::filesystem::path const& dir, std::string_view what) {
  namespace fs = std::filesystem;
  std::string const where = "convoy: " + std::string(what) + " '" + dir.string() + "'";
  std::error_code ec;
  auto const type = fs::status(dir, ec).type();
  if (type == fs::file_type::not_found) {
    fs::create_directories(dir, ec);
    if (ec) throw Error(where + " cannot be created: " + ec.message());
  } else if (ec) {
    throw Error(where + " cannot be examined: " + ec.message());
  } else if (type != fs::file_type::directory) {
    throw Error(where + " is not a directory");
  }
  detail::probe_directory(dir, where);
}

/// Makes sure `file` can be written (replaced atomically, as save_weights does) before work that
/// ends by writing it: it is not a directory or other special file, its directory exists and
/// accepts new files, and when it exists it opens for writing (nothing is changed). With
/// `weights_format`, its extension must also name a weights format (format_for). `what` names the
/// file's role in messages ("weights file"). Blocks on file I/O. Throws convoy::Error naming
/// `what`, the path and the reason.
inline void require_writable_file(std::filesystem::path const& file, std::string_view what,
                                  bool weights_format = false) {
  namespace fs = std::filesystem;
  std::string const where = "convoy: " + std::string(what) + " '" + file.string() + "'";
  std::error_code ec;
  auto const type = fs::status(file, ec).type();
  if (type == fs::file_type::directory ||
      (type == fs::file_type::not_found && !file.has_filename())) {
    throw Error(where + " is a directory, not a file");
  }
  if (type != fs::file_type::not_found && type != fs::file_type::regular) {
    throw Error(where + (ec ? " cannot be examined: " + ec.message() : " is not a regular file"));
  }
  if (weights_format) static_cast<void>(format_for(file));

  auto const dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  std::string const dir_where = where + ": its directory '" + dir.string() + "'";
  auto const dir_type = fs::status(dir, ec).type();
  if (dir_type == fs::file_type::not_found) throw Error(dir_where + " does not exist");
  if (dir_type != fs::file_type::directory) {
    throw Error(dir_where + (ec ? " cannot be examined: " + ec.message() : " is not a directory"));
  }
  detail::probe_directory(dir, dir_where);

  if (type == fs::file_type::regular) {
    int const fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      int const err = errno;
      throw Error(where + " is not writable: " + std::generic_category().message(err));
    }
    ::close(fd);
  }
}

namespace detail {

// Binary archives drop NVP names and read sizes straight from the bytes; JSON reads sizes from a
// parsed document. The two need different guards on load (see load_sequence).
template <class Archive>
inline constexpr bool reads_binary =
    cereal::traits::is_input_serializable<cereal::BinaryData<char>, Archive>::value;
template <class Archive>
inline constexpr bool writes_binary =
    cereal::traits::is_output_serializable<cereal::BinaryData<char>, Archive>::value;

template <class T>
struct is_flat_sequence : std::false_type {};
template <>
struct is_flat_sequence<std::string> : std::true_type {};
template <class T>
requires std::is_arithmetic_v<T> &&
    (!std::is_same_v<T, bool>)struct is_flat_sequence<std::vector<T>> : std::true_type {
};

// Elements read per step of load_sequence: 4 MiB, so a damaged size field costs at most that much
// memory before the read fails, while a genuine large tensor still loads in few calls.
inline constexpr std::size_t load_chunk_bytes = std::size_t{4} << 20;

// Reads a string or arithmetic vector written by cereal's own save (a size tag, then the raw
// elements) from a binary archive. cereal's load would resize to whatever size the bytes claim,
// and a garbage file would then allocate (and zero) terabytes; here memory grows only as bytes
// actually arrive, so a lying size ends in cereal's "failed to read" exception.
template <class Archive, class Sequence>
void load_sequence(Archive& ar, Sequence& out) {
  using Value = typename Sequence::value_type;
  constexpr std::size_t chunk = load_chunk_bytes / sizeof(Value);
  cereal::size_type size = 0;
  ar(cereal::make_size_tag(size));
  out.clear();
  out.reserve(static_cast<std::size_t>(std::min<cereal::size_type>(size, chunk)));
  while (out.size() < size) {
    std::size_t const done = out.size();
    auto const take = static_cast<std::size_t>(std::min<cereal::size_type>(size - done, chunk));
    out.resize(done + take);
    ar(cereal::binary_data(out.data() + done, take * sizeof(Value)));
  }
}

// One field of a record: guarded for binary archives, by name for the others.
template <class Archive, class T>
void load_field(Archive& ar, char const* name, T& value) {
  if constexpr (reads_binary<Archive> && is_flat_sequence<T>::value) {
    load_sequence(ar, value);
  } else {
    ar(cereal::make_nvp(name, value));
  }
}

// Saves a span exactly as cereal saves a std::vector of the same elements, so one loader reads
// both and JSON shows an ordinary array.
template <class T>
struct SpanView {
  std::span<T const> values;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(values.size())));
    if constexpr (writes_binary<Archive>) {
      ar(cereal::binary_data(values.data(), values.size_bytes()));
    } else {
      for (T const& v : values) ar(v);
    }
  }
};

// The one place a record's layout is written: NamedTensor and the no-copy views below share it.
template <class Archive>
void save_record(Archive& ar, std::string const& name, std::span<std::uint64_t const> shape,
                 std::span<float const> data) {
  ar(cereal::make_nvp("name", name), cereal::make_nvp("shape", SpanView<std::uint64_t>{shape}),
     cereal::make_nvp("data", SpanView<float>{data}));
}

}  // namespace detail

/// One record of a weights file or checkpoint: a tensor and its variable's full name. Files hold
/// an ordered sequence of these because binary archives drop cereal's NVP names; matching by the
/// stored name lets binary and JSON files be checked the same way. Loading from a binary archive
/// never allocates more than the bytes actually present (plus 4 MiB), whatever the sizes claim.
struct NamedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  std::vector<float> data;

  template <class Archive>
  void save(Archive& ar) const {
    detail::save_record(ar, name, shape, data);
  }
  template <class Archive>
  void load(Archive& ar) {
    detail::load_field(ar, "name", name);
    detail::load_field(ar, "shape", shape);
    detail::load_field(ar, "data", data);
  }

  friend bool operator==(NamedTensor const&, NamedTensor const&) = default;
};

namespace detail {

// A record to be written, pointing into a map or a Variables arena instead of copying the floats.
struct RecordView {
  std::string const* name;
  std::vector<std::uint64_t> shape;
  std::span<float const> data;

  template <class Archive>
  void save(Archive& ar) const {
    save_record(ar, *name, shape, data);
  }
};

inline std::vector<std::uint64_t> to_dims(Shape const& shape) {
  return {shape.begin(), shape.end()};
}

inline std::vector<RecordView> record_views(std::map<std::string, Tensor> const& named) {
  std::vector<RecordView> views;
  views.reserve(named.size());
  for (auto const& [name, tensor] : named)
    views.push_back({&name, to_dims(tensor.shape), tensor.data});
  return views;
}

inline std::vector<RecordView> record_views(Variables const& vars) {
  std::vector<RecordView> views;
  views.reserve(vars.size());
  for (auto const& v : vars.list()) {
    views.push_back({&v.name, to_dims(v.shape), vars.weights().subspan(v.offset, v.size)});
  }
  return views;
}

// The sequence of records, written like a std::vector<NamedTensor>.
struct RecordsOut {
  std::vector<RecordView> const& records;

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_size_tag(static_cast<cereal::size_type>(records.size())));
    for (auto const& r : records) ar(r);
  }
};

// Reads records one at a time into a map: never sized up front from the file, since a damaged
// binary count would otherwise allocate before the first record is read. Its LoadError messages
// lack the "convoy: <source>" prefix, which only the caller knows.
struct RecordsIn {
  std::map<std::string, Tensor>& named;

  template <class Archive>
  void load(Archive& ar) {
    cereal::size_type count = 0;
    ar(cereal::make_size_tag(count));
    for (cereal::size_type i = 0; i < count; ++i) {
      NamedTensor record;
      ar(record);
      std::size_t expected = 1;
      bool overflow = false;
      Shape shape;
      shape.reserve(record.shape.size());
      for (auto dim : record.shape) {
        overflow = overflow || dim > std::numeric_limits<std::size_t>::max() ||
                   (dim != 0 && expected > std::numeric_limits<std::size_t>::max() / dim);
        if (!overflow) expected *= static_cast<std::size_t>(dim);
        shape.push_back(static_cast<std::size_t>(dim));
      }
      if (overflow || expected != record.data.size()) {
        throw LoadError("record '" + record.name + "' has shape " + to_string(shape) +
                        (overflow ? " (too large)" : " (" + std::to_string(expected) + " values)") +
                        " but holds " + std::to_string(record.data.size()) + " values");
      }
      auto const name = record.name;
      if (!named.try_emplace(name, Tensor{std::move(shape), std::move(record.data)}).second) {
        throw LoadError("record '" + name + "' appears twice");
      }
    }
  }
};

template <class Archive>
void save_records(Archive& ar, char const* name, std::vector<RecordView> const& records) {
  ar(cereal::make_nvp(name, RecordsOut{records}));
}

template <class Archive>
void load_records(Archive& ar, char const* name, std::map<std::string, Tensor>& named) {
  ar(cereal::make_nvp(name, RecordsIn{named}));
}

inline void write_records(std::ostream& out, std::vector<RecordView> const& records,
                          Format format) {
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

inline std::string error_text(int err) { return std::generic_category().message(err); }

// fsync through a second descriptor: std::ofstream exposes none, and Linux flushes the file's
// pages whichever descriptor asks.
inline void sync_file(std::filesystem::path const& path) {
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int const err = errno;
    throw Error("convoy: cannot open '" + path.string() + "' to sync it: " + error_text(err));
  }
  int const rc = ::fsync(fd);
  int const err = errno;
  ::close(fd);
  if (rc != 0) throw Error("convoy: cannot sync '" + path.string() + "': " + error_text(err));
}

// Makes a rename durable. Best effort: the new file is already complete and in place, and some
// file systems refuse fsync on a directory, so a failure here must not fail the save.
inline void sync_directory(std::filesystem::path const& dir) {
  int const fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  static_cast<void>(::fsync(fd));
  ::close(fd);
}

// Writes `target` through `write(std::ostream&)` so that readers see the old file or the new one,
// never a mixture: write `<target>.tmp-<pid>`, flush, fsync, rename over the target, fsync the
// directory. The temporary file is removed on any failure. Two threads of one process must not
// write the same target at once (they would share the temporary name).
template <class Write>
void write_atomically(std::filesystem::path const& target, Write&& write) {
  auto temp = target;
  temp += ".tmp-" + std::to_string(::getpid());
  try {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) {
      int const err = errno;
      throw Error("convoy: cannot open '" + temp.string() + "' to write '" + target.string() +
                  "': " + error_text(err));
    }
    std::forward<Write>(write)(static_cast<std::ostream&>(out));
    out.flush();
    out.close();
    if (!out) {
      int const err = errno;
      throw Error("convoy: writing '" + temp.string() + "' failed: " + error_text(err));
    }
    sync_file(temp);
    std::error_code ec;
    std::filesystem::rename(temp, target, ec);
    if (ec) {
      throw Error("convoy: cannot rename '" + temp.string() + "' to '" + target.string() +
                  "': " + ec.message());
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw;
  }
  sync_directory(target.parent_path());
}

// Opens `path` for reading or throws `Exception` naming it: "does not exist" when absent, a
// refusal when it is not a regular file (a FIFO would block the open, a device may never end),
// else the system's reason.
template <class Exception>
std::ifstream open_for_reading(std::filesystem::path const& path, std::string_view what) {
  std::string const where = "convoy: " + std::string(what) + " '" + path.string() + "'";
  std::error_code ec;
  auto const type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::not_found) throw Exception(where + " does not exist");
  if (type == std::filesystem::file_type::directory) {
    throw Exception(where + " is a directory, not a file");
  }
  if (!ec && type != std::filesystem::file_type::regular) {
    throw Exception(where + " is not a regular file (a FIFO, socket or device is not read)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int const err = errno;
    throw Exception("convoy: cannot open " + std::string(what) + " '" + path.string() +
                    "': " + error_text(err));
  }
  return in;
}

// Binary files convoy writes (checkpoints, binary weights files) start with a 24-byte header: an
// 8-byte magic, a format version (uint32), the payload's length (uint64) and the payload's
// CRC-32 (uint32), all little-endian. A random, cut, damaged or foreign file is then refused by
// name with the reason, before a parser sees it.
inline constexpr std::size_t framed_header_size = 8 + 4 + 8 + 4;

// What one kind of framed file is: its magic (8 bytes), the version this build writes and reads,
// and its name in messages ("checkpoint").
struct FramedKind {
  std::string_view magic;
  std::uint32_t version;
  std::string_view noun;
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
  std::uint64_t end = 0;  // offset just past the payload: the file's size
  std::string where;      // "convoy: <noun> '<path>' ", to start messages

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
  if (version != kind.version) {
    throw framed.fail("has format version " + std::to_string(version) + ", this build reads " +
                      std::to_string(kind.version));
  }
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

// Binary weights files: `binary` has its own magic apart from `portable_binary`'s, as each
// archive reads only what it wrote itself. JSON files stay plain text, without a header.
inline constexpr FramedKind binary_weights_kind{"CONVOYWB", 1, "binary weights file"};
inline constexpr FramedKind portable_weights_kind{"CONVOYWP", 1, "portable binary weights file"};

inline FramedKind const& weights_kind(Format format) {
  return format == Format::binary ? binary_weights_kind : portable_weights_kind;
}

// A weights file's bytes: for binary formats a header, then the records.
inline void write_weights_file(std::ostream& out, std::vector<RecordView> const& records,
                               Format format) {
  if (format == Format::json) {
    write_records(out, records, format);
  } else {
    write_framed(out, weights_kind(format),
                 [&](std::ostream& payload) { write_records(payload, records, format); });
  }
}

// Deepest nesting of JSON arrays and objects read. A weights file nests 4 deep ({"tensors":
// [{"shape": [...]}]}). rapidjson, which cereal's JSON archive uses, parses recursively with no
// limit, so a file of 200,000 '[' would overflow the stack instead of failing.
inline constexpr std::size_t json_max_depth = 64;

// Follows JSON text through any number of pieces, tracking how deep arrays and objects nest
// outside strings. It does not validate the JSON; the parser does that once depth is known safe.
struct JsonNesting {
  std::size_t depth = 0;
  bool in_string = false;
  bool escaped = false;

  // False as soon as nesting passes json_max_depth.
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

// Without the "convoy: <source>" prefix, which read_named() adds.
[[noreturn]] inline void json_too_deep() {
  throw LoadError("JSON arrays and objects nest more than " + std::to_string(json_max_depth) +
                  " levels deep; a weights file needs 4, so it is damaged or not one");
}

// Parses JSON records from `in` once their nesting is known to be within json_max_depth. A
// seekable stream is scanned and rewound; any other is read into memory first (cereal builds the
// whole document in memory anyway).
inline void read_json_records(std::istream& in, std::map<std::string, Tensor>& named) {
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
inline void write_named(std::ostream& out, std::map<std::string, Tensor> const& named,
                        Format format) {
  detail::write_records(out, detail::record_views(named), format);
}

/// Reads what write_named() wrote (no header). `what` names the source in messages (say
/// "'ckpt/w.bin'"). Blocks on the stream. Throws LoadError naming `what` when the bytes cannot be
/// parsed (truncated, garbage, another format, JSON nested deeper than 64 levels), when a record's
/// value count differs from its shape's, or when a name appears twice; never crashes on bad input.
/// JSON is scanned before it is parsed: a seekable stream is rewound, any other is held in memory.
inline std::map<std::string, Tensor> read_named(std::istream& in, Format format,
                                                std::string const& what) {
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
inline void save_named(std::filesystem::path const& path,
                       std::map<std::string, Tensor> const& named, Format format) {
  auto const records = detail::record_views(named);
  detail::write_atomically(
      path, [&](std::ostream& out) { detail::write_weights_file(out, records, format); });
}

/// Reads a file written by save_named() or save_weights(). Blocks on file I/O (a binary file is
/// read twice: once for its checksum, once to parse). Throws convoy::Error naming the path when it
/// is missing, is not a regular file or cannot be opened; LoadError naming it when a binary file
/// is not a convoy weights file of that format, has another format version, is truncated, fails
/// its checksum or has bytes left over, or when the contents cannot be parsed (see read_named).
inline std::map<std::string, Tensor> load_named(std::filesystem::path const& path, Format format) {
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
inline void save_weights(std::filesystem::path const& path, Variables const& vars,
                         std::optional<Format> format = {}) {
  Format const chosen = format ? *format : format_for(path);
  auto const records = detail::record_views(vars);
  detail::write_atomically(
      path, [&](std::ostream& out) { detail::write_weights_file(out, records, chosen); });
}

/// Loads weights saved by save_weights() into `vars`, matching records to variables by name.
/// Blocks on file I/O. Throws convoy::Error when the file is missing or unreadable, and LoadError
/// naming the path when it is refused (see load_named) or when any name is unknown, missing or
/// mis-shaped (the message lists all of them). On any error `vars` is unchanged.
inline void load_weights(std::filesystem::path const& path, Variables& vars,
                         std::optional<Format> format = {}) {
  Format const chosen = format ? *format : format_for(path);
  // Read the whole file before touching `vars`, so a bad file cannot leave it half loaded.
  auto const named = load_named(path, chosen);
  vars.check_names(named, "loading '" + path.string() + "'");
  vars.set_weights(named);
}

}  // namespace convoy::io
