// TFRecord framing, the container of TensorBoard event files: each record is its length (8 bytes,
// little-endian), the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.
// A writer and a reader that checks both CRCs.
#pragma once

#include <array>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "crc32c.hpp"

namespace convoy::tensorboard {

namespace detail {
template <std::size_t N>
void put_le(std::array<char, N>& out, std::uint64_t value) {
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFFu);
}
template <std::size_t N>
std::uint64_t get_le(std::array<char, N> const& in) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < N; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}
}  // namespace detail

/// Appends one record holding `data` to `out`. Does not flush; the stream's state tells whether
/// it was written.
inline void write_record(std::ostream& out, std::string_view data) {
  std::array<char, 8> length;
  detail::put_le(length, data.size());
  std::array<char, 4> length_crc, data_crc;
  detail::put_le(length_crc, mask_crc(crc32c(std::string_view(length.data(), length.size()))));
  detail::put_le(data_crc, mask_crc(crc32c(data)));
  out.write(length.data(), length.size());
  out.write(length_crc.data(), length_crc.size());
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.write(data_crc.data(), data_crc.size());
}

/// Reads the next record from `in`: its data, or nothing at a clean end of the stream. Throws
/// Error naming `what` (the file) for a truncated record or a CRC that does not match.
inline std::optional<std::string> read_record(std::istream& in, std::string_view what) {
  auto fail = [&](std::string const& reason) {
    return Error("convoy: TFRecord file '" + std::string(what) + "': " + reason);
  };
  std::array<char, 8> length;
  in.read(length.data(), length.size());
  if (in.gcount() == 0 && in.eof()) return std::nullopt;
  if (in.gcount() != static_cast<std::streamsize>(length.size())) {
    throw fail("truncated record length");
  }
  std::array<char, 4> crc;
  if (!in.read(crc.data(), crc.size())) throw fail("truncated length CRC");
  if (unmask_crc(static_cast<std::uint32_t>(detail::get_le(crc))) !=
      crc32c(std::string_view(length.data(), length.size()))) {
    throw fail("the CRC of a record length does not match");
  }
  std::string data(detail::get_le(length), '\0');
  if (!in.read(data.data(), static_cast<std::streamsize>(data.size()))) {
    throw fail("truncated record of " + std::to_string(data.size()) + " bytes");
  }
  if (!in.read(crc.data(), crc.size())) throw fail("truncated data CRC");
  if (unmask_crc(static_cast<std::uint32_t>(detail::get_le(crc))) != crc32c(data)) {
    throw fail("the CRC of a record's data does not match");
  }
  return data;
}

}  // namespace convoy::tensorboard
