// Task addresses, "host:port": the one parser every cluster source checks its addresses with, so
// TF_CONFIG, the flags and a hand-built Cluster reject the same things with the same words.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "detail/text.hpp"

namespace convoy {

/// A task's address split into its parts. An IPv6 host keeps no brackets ("::1").
struct Address {
  std::string host;
  int port = 0;
  bool operator==(Address const&) const = default;
};

/// Splits "host:port" (or "[v6 host]:port"). The host must be non-empty and free of spaces, the
/// port a decimal number in 1..65535. Throws ClusterError quoting `text` and naming `source`
/// (where the address was read: a flag, a TF_CONFIG entry) otherwise.
inline Address parse_address(std::string_view text, std::string_view source) {
  auto fail = [&](std::string const& problem) {
    throw ClusterError("convoy: " + std::string(source) + ": address " + detail::quote(text) + " " +
                       problem);
  };
  if (text.empty()) fail("is empty; write host:port");
  Address out;
  std::string_view rest;
  if (text.front() == '[') {
    auto const close = text.find(']');
    if (close == std::string_view::npos) fail("opens '[' without a closing ']'");
    out.host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') fail("has no ':port' after the bracketed host");
    rest.remove_prefix(1);
  } else {
    auto const colon = text.rfind(':');
    if (colon == std::string_view::npos) fail("has no port; write host:port");
    out.host = std::string(text.substr(0, colon));
    rest = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos)
      fail("has more than one ':'; an IPv6 host goes in brackets, as in [::1]:2222");
  }
  if (out.host.empty()) fail("has an empty host");
  if (out.host.find_first_of(" \t\r\n") != std::string::npos) fail("has a space in its host");
  // A NUL (or another control byte) would cut the name short where the resolver reads it, so
  // that a task would serve or reach another host than the one the spec names.
  for (char const c : out.host) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      fail("has a control character (byte " + std::to_string(static_cast<int>(c)) +
           ") in its host");
  }
  bool const digits = !rest.empty() && rest.find_first_not_of("0123456789") == rest.npos;
  if (!digits) fail("has port " + detail::quote(rest) + ", which is not a number");
  auto const port = detail::parse_count(rest);  // nullopt: too large even for int
  if (!port || *port < 1 || *port > 65535)
    fail("has port " + detail::quote(rest) + ", outside 1..65535");
  out.port = *port;
  return out;
}

/// "host:port", with brackets around an IPv6 host.
inline std::string format_address(std::string_view host, int port) {
  bool const v6 = host.find(':') != std::string_view::npos;
  std::string out;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

/// Whether a bind host ("127.0.0.1", "::1", "[::1]", "localhost", "*", ...) is loopback only:
/// plaintext servers accept no other unless told to.
inline bool is_loopback(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost" || host == "::1") return true;
  unsigned a = 0, b = 0, c = 0, d = 0;
  char rest = 0;
  return std::sscanf(host.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &rest) == 4 && a == 127 &&
         b < 256 && c < 256 && d < 256;
}

}  // namespace convoy
