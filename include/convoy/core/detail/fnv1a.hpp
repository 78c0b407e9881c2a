// FNV-1a, 64 bits: a quick hash for processes to agree on something (a shard's layout, a run),
// not for secrecy.
#pragma once

#include <cstdint>
#include <string_view>

namespace convoy::detail {

class Fnv1a {
 public:
  Fnv1a& add(std::string_view bytes) {
    for (unsigned char c : bytes) hash_ = (hash_ ^ c) * prime;
    return *this;
  }
  std::uint64_t value() const { return hash_; }

 private:
  static constexpr std::uint64_t prime = 1099511628211ULL;
  std::uint64_t hash_ = 1469598103934665603ULL;
};

}  // namespace convoy::detail
