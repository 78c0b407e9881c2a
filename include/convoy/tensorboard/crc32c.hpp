// CRC32C (the Castagnoli polynomial, as SSE4.2 and iSCSI use it) and the masked form that
// TFRecord files carry after each length and each record. zlib's crc32 uses another polynomial
// and would give files TensorBoard rejects.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace convoy::tensorboard {

namespace detail {
// One table of 256 entries for the reflected polynomial 0x82F63B78, built at compile time.
inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();
}  // namespace detail

/// CRC32C of `bytes`, continuing from `crc` (the CRC of what came before; 0 to start).
/// crc32c("123456789") == 0xE3069283. Pure; any thread.
constexpr std::uint32_t crc32c(std::span<std::byte const> bytes, std::uint32_t crc = 0) {
  crc = ~crc;
  for (std::byte b : bytes) {
    crc = detail::crc32c_table[(crc ^ static_cast<std::uint32_t>(b)) & 0xFFu] ^ (crc >> 8);
  }
  return ~crc;
}
constexpr std::uint32_t crc32c(std::string_view text, std::uint32_t crc = 0) {
  crc = ~crc;
  for (char ch : text) {
    crc = detail::crc32c_table[(crc ^ static_cast<unsigned char>(ch)) & 0xFFu] ^ (crc >> 8);
  }
  return ~crc;
}

/// The masked CRC TFRecord stores: rotated right by 15 bits plus a constant, so that a CRC of
/// data that itself holds CRCs stays well mixed (TensorFlow's crc32c::Mask).
constexpr std::uint32_t mask_crc(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}
/// The inverse of mask_crc.
constexpr std::uint32_t unmask_crc(std::uint32_t masked) {
  std::uint32_t const rot = masked - 0xA282EAD8u;
  return (rot >> 17) | (rot << 15);
}

static_assert(crc32c(std::string_view("123456789")) == 0xE3069283u, "CRC32C check value");

}  // namespace convoy::tensorboard
