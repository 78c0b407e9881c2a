// Gloo's error text, made readable. Gloo begins each message with "[source file:line] ", which
// names nothing a user can act on, and its TCP transport prints an address as "[127.0.0.1]:17836"
// with the port's two bytes as they sit in the socket address (network order), so on a
// little-endian machine the number is byte-swapped: 17836 for port 44101. Both are mended here,
// so that a message names a port the user can find in the cluster spec or in `ss -tlnp`. Whether
// the linked Gloo swaps is asked of Gloo itself, once, so a Gloo that prints ports right is left
// as it is.
#pragma once

#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <regex>
#include <string>

namespace convoy::comm::gloo_fabric {

namespace detail {
// True when Gloo prints port 0x1234 as 0x3412.
inline bool gloo_swaps_ports() {
  static bool const swaps = [] {
    ::sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(0x1234);
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto const text =
        ::gloo::transport::tcp::Address(reinterpret_cast<::sockaddr const*>(&in), sizeof in).str();
    return text.find(":" + std::to_string(0x3412)) != std::string::npos;
  }();
  return swaps;
}
}  // namespace detail

/// `what` without Gloo's "[file:line] " prefix, its "[host]:port" addresses written "host:port"
/// with the port Gloo meant (`swapped`: whether Gloo prints ports byte-swapped).
inline std::string readable_gloo_message(std::string what,
                                         bool swapped = detail::gloo_swaps_ports()) {
  if (what.starts_with("[") && what.find("] ") != std::string::npos) {
    what.erase(0, what.find("] ") + 2);
  }
  static std::regex const address(R"(\[([0-9A-Fa-f.:]+)\]:([0-9]{1,5}))");
  std::string out;
  auto from = what.cbegin();
  for (std::sregex_iterator it(what.begin(), what.end(), address), end; it != end; ++it) {
    auto const& m = *it;
    out.append(from, m[0].first);
    auto port = static_cast<std::uint32_t>(std::stoul(m[2].str()));
    if (swapped && port <= 0xffff) {
      port = ((port & 0xffu) << 8) | (port >> 8);
    }
    std::string const host = m[1].str();
    out += (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
    from = m[0].second;
  }
  out.append(from, what.cend());
  return out;
}

}  // namespace convoy::comm::gloo_fabric
