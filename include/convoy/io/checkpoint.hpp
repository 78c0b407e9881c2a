// Checkpoints: everything a run needs to resume (weights, optimizer slots, steps, data order, RNG),
// in one file with a magic, a format version, a length and a CRC-32, written atomically so a crash
// never leaves a half-written checkpoint and a damaged one is refused with a message saying how.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../core/tensor.hpp"
#include "weights.hpp"

namespace convoy::io {

/// The state of a run at one global step: the strategy's Snapshot and the sampler's seed, so the
/// data order resumes unchanged.
struct Checkpoint {
  Snapshot state;
  std::uint64_t data_seed = 0;
};

/// cereal save for Checkpoint; the maps go as NamedTensor records, as in weights files.
template <class Archive>
void save(Archive& ar, Checkpoint const& c) {
  auto const& s = c.state;
  detail::save_records(ar, "weights", detail::record_views(s.weights));
  ar(cereal::make_nvp("optimizer", s.optimizer));
  detail::save_records(ar, "slots", detail::record_views(s.slots));
  ar(cereal::make_nvp("optimizer_updates", s.optimizer_updates),
     cereal::make_nvp("global_step", s.counters.global_step),
     cereal::make_nvp("applied", s.counters.applied), cereal::make_nvp("dropped", s.counters.dropped),
     cereal::make_nvp("local_steps", s.counters.local_steps),
     cereal::make_nvp("generators", s.generators), cereal::make_nvp("data_seed", c.data_seed));
}

/// cereal load for Checkpoint. Throws cereal::Exception on unparsable bytes and LoadError on a
/// bad record; never allocates more than the bytes present (plus a few MiB) in a binary archive.
template <class Archive>
void load(Archive& ar, Checkpoint& c) {
  auto& s = c.state;
  detail::load_records(ar, "weights", s.weights);
  detail::load_field(ar, "optimizer", s.optimizer);
  detail::load_records(ar, "slots", s.slots);
  ar(cereal::make_nvp("optimizer_updates", s.optimizer_updates),
     cereal::make_nvp("global_step", s.counters.global_step),
     cereal::make_nvp("applied", s.counters.applied), cereal::make_nvp("dropped", s.counters.dropped));
  detail::load_field(ar, "local_steps", s.counters.local_steps);
  ar(cereal::make_nvp("generators", s.generators));
  ar(cereal::make_nvp("data_seed", c.data_seed));
}

namespace detail {

inline constexpr std::string_view checkpoint_magic = "CONVOYCK";
inline constexpr std::uint32_t checkpoint_version = 2;
// magic, version (uint32), payload length (uint64), CRC-32 of the payload (uint32)
inline constexpr std::size_t checkpoint_header_size = 8 + 4 + 8 + 4;
inline constexpr std::string_view checkpoint_prefix = "checkpoint-";
inline constexpr std::string_view checkpoint_suffix = ".convoy";

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

inline std::array<char, checkpoint_header_size> checkpoint_header(std::uint64_t length,
                                                                  std::uint32_t crc) {
  std::array<char, checkpoint_header_size> header{};
  std::memcpy(header.data(), checkpoint_magic.data(), checkpoint_magic.size());
  put_le(header.data() + 8, checkpoint_version);
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
  std::uint32_t crc_ = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
};

// The step a checkpoint file name holds, or nullopt for any other name (temporary files included).
inline std::optional<std::int64_t> checkpoint_step(std::filesystem::path const& file) {
  std::string const name = file.filename().string();
  if (name.size() <= checkpoint_prefix.size() + checkpoint_suffix.size() ||
      !name.starts_with(checkpoint_prefix) || !name.ends_with(checkpoint_suffix)) {
    return std::nullopt;
  }
  char const* first = name.data() + checkpoint_prefix.size();
  char const* last = name.data() + name.size() - checkpoint_suffix.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  std::int64_t step = 0;
  auto const [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc{} || end != last) return std::nullopt;
  return step;
}

// Every checkpoint file in `dir` with its step, highest step first; empty when `dir` is absent.
inline std::vector<std::pair<std::int64_t, std::filesystem::path>> list_checkpoints(
    std::filesystem::path const& dir) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return found;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot list checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  for (auto const& entry : it) {
    if (!entry.is_regular_file(ec)) continue;
    if (auto step = checkpoint_step(entry.path())) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end(),
            [](auto const& a, auto const& b) { return a.first > b.first; });
  return found;
}

}  // namespace detail

/// The file name save_checkpoint() gives `step`: "checkpoint-0000000042.convoy" (ten digits, more
/// when needed, so names sort by step).
inline std::string checkpoint_file_name(std::int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 10) digits.insert(0, 10 - digits.size(), '0');
  return std::string(detail::checkpoint_prefix) + digits + std::string(detail::checkpoint_suffix);
}

/// Writes `checkpoint` to `dir/checkpoint_file_name(step)` and returns that path. The file appears
/// whole or not at all: it is written to a temporary file in `dir`, flushed, fsynced and renamed,
/// and the directory is fsynced. Creates `dir` when needed. Then keeps the `keep` checkpoints of
/// highest step in `dir` and deletes the older ones (never the one just written; keep == 0 keeps
/// all; a file that cannot be deleted is left). Blocks on file I/O; do not save into one `dir` from
/// two threads at once. Throws CheckpointError for a negative step or an unusable `dir`, and
/// convoy::Error naming the path and the system's reason when the file cannot be written.
inline std::filesystem::path save_checkpoint(std::filesystem::path const& dir,
                                             Checkpoint const& checkpoint, std::size_t keep = 3) {
  std::int64_t const step = checkpoint.state.counters.global_step;
  if (step < 0) {
    throw CheckpointError("convoy: cannot save a checkpoint of step " + std::to_string(step) +
                          " to '" + dir.string() + "'; steps start at 0");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw CheckpointError("convoy: cannot create checkpoint directory '" + dir.string() +
                          "': " + ec.message());
  }
  auto const file = dir / checkpoint_file_name(step);
  detail::write_atomically(file, [&](std::ostream& out) {
    // The header's length and CRC are known only after the payload: reserve its place, stream the
    // payload through the checksum, then come back and fill it in.
    auto header = detail::checkpoint_header(0, 0);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    detail::ChecksumWriter summed(out.rdbuf());
    {
      std::ostream payload(&summed);
      cereal::PortableBinaryOutputArchive ar(payload);
      ar(checkpoint);
    }
    header = detail::checkpoint_header(summed.size(), summed.crc());
    out.seekp(0);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
  });
  if (keep > 0) {
    auto const all = detail::list_checkpoints(dir);
    for (std::size_t i = keep; i < all.size(); ++i) {
      // A failed delete only costs disk space; the new checkpoint is safely written, so the save
      // must not report failure for it.
      if (all[i].second != file) std::filesystem::remove(all[i].second, ec);
    }
  }
  return file;
}

/// Reads a checkpoint written by save_checkpoint(). Blocks on file I/O (it reads the file twice:
/// once for the checksum, once to parse, so no copy of the payload is held). Throws
/// CheckpointError naming the file when it is missing or unreadable, is not a convoy checkpoint,
/// has another format version, is truncated (saying how many bytes were expected and found), fails
/// its checksum, or holds a payload that cannot be parsed.
inline Checkpoint load_checkpoint(std::filesystem::path const& file) {
  auto in = detail::open_for_reading<CheckpointError>(file, "checkpoint");
  std::string const where = "convoy: checkpoint '" + file.string() + "' ";
  auto fail = [&](std::string const& why) { return CheckpointError(where + why); };

  in.seekg(0, std::ios::end);
  auto const file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  std::array<char, detail::checkpoint_header_size> header{};
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  auto const got = static_cast<std::size_t>(in.gcount());

  // Checked in this order so each message names the real fault: a foreign file would otherwise be
  // reported as truncated or damaged, and a cut file as damaged.
  std::size_t const magic_seen = std::min(got, detail::checkpoint_magic.size());
  if (std::string_view(header.data(), magic_seen) !=
      detail::checkpoint_magic.substr(0, magic_seen)) {
    throw fail("is not a convoy checkpoint (it does not start with \"CONVOYCK\")");
  }
  if (got < header.size()) {
    throw fail("is truncated: its header needs " + std::to_string(header.size()) +
               " bytes, found " + std::to_string(got));
  }
  auto const version = detail::get_le<std::uint32_t>(header.data() + 8);
  if (version != detail::checkpoint_version) {
    throw fail("has format version " + std::to_string(version) + ", this build reads " +
               std::to_string(detail::checkpoint_version));
  }
  auto const length = detail::get_le<std::uint64_t>(header.data() + 12);
  auto const stored_crc = detail::get_le<std::uint32_t>(header.data() + 20);
  std::uint64_t const found = file_size - header.size();
  if (found < length) {
    throw fail("is truncated: the header promises " + std::to_string(length) +
               " payload bytes, found " + std::to_string(found));
  }
  // Extra bytes mean the length field itself is wrong, so the payload boundary cannot be trusted.
  if (found > length) {
    throw fail("is damaged: " + std::to_string(found - length) +
               " unexpected bytes follow its payload of " + std::to_string(length));
  }

  std::uint32_t crc = static_cast<std::uint32_t>(::crc32(0L, Z_NULL, 0));
  std::vector<char> buffer(std::size_t{1} << 20);
  for (std::uint64_t left = length; left > 0;) {
    auto const want = static_cast<std::size_t>(std::min<std::uint64_t>(left, buffer.size()));
    in.read(buffer.data(), static_cast<std::streamsize>(want));
    if (static_cast<std::size_t>(in.gcount()) != want) {
      throw fail("could not be read to its end (did it change while being read?)");
    }
    crc = detail::crc32_update(crc, buffer.data(), want);
    left -= want;
  }
  if (crc != stored_crc) {
    throw fail("is damaged: checksum mismatch (the header says " + std::to_string(stored_crc) +
               ", the payload sums to " + std::to_string(crc) + ")");
  }

  Checkpoint checkpoint;
  in.clear();
  in.seekg(static_cast<std::streamoff>(header.size()));
  try {
    cereal::PortableBinaryInputArchive ar(in);
    ar(checkpoint);
  } catch (cereal::Exception const& e) {
    throw fail("has a payload that cannot be parsed (cereal: " + std::string(e.what()) + ")");
  } catch (LoadError const& e) {
    throw fail("has a payload that cannot be parsed: " + std::string(e.what()));
  }
  // A checksum-valid payload that parses short was written by another layout: refuse, not guess.
  auto const end = static_cast<std::uint64_t>(in.tellg());
  if (end != file_size) {
    throw fail("has a payload that cannot be parsed: " + std::to_string(file_size - end) +
               " bytes are left over");
  }
  return checkpoint;
}

/// The checkpoint of highest step in `dir` (files named like checkpoint_file_name(); temporary and
/// other files are ignored), or nullopt when there is none or `dir` does not exist. Does not open
/// the files. Blocks on a directory listing; throws CheckpointError when `dir` exists but cannot be
/// listed.
inline std::optional<std::filesystem::path> latest_checkpoint(std::filesystem::path const& dir) {
  auto const all = detail::list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.front().second;
}

}  // namespace convoy::io
