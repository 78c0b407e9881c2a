// Whether nothing listens at a TCP address any more: the kernel refuses a connection to a port no
// socket holds, at once, and a process's sockets go with it when it ends, however it ends. A
// stopped process still holds its ports (the kernel takes connections for it), and a host that
// does not answer refuses nothing, so neither is taken for gone here.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

#include "../../cluster/address.hpp"
#include "../../cluster/host_lookup.hpp"
#include "sockets.hpp"

namespace convoy::comm::detail {

/// True when a TCP connection to `address` ("host:port" of an IPv4 host or a name that resolves
/// to one) is refused within `wait`; false when it is taken or times out, or the address does not
/// parse or resolve. The connection, when taken, is closed at once.
inline bool refuses_connections(std::string const& address, std::chrono::milliseconds wait) {
  std::string numeric;
  ::sockaddr_storage to{};
  auto& in = reinterpret_cast<::sockaddr_in&>(to);
  try {
    auto const parsed = parse_address(address, "a peer's address");
    if (lookup_ipv4(parsed.host, &numeric) != 0) return false;
    in.sin_port = htons(static_cast<std::uint16_t>(parsed.port));
  } catch (Error const&) {
    return false;
  }
  in.sin_family = AF_INET;
  if (::inet_pton(AF_INET, numeric.c_str(), &in.sin_addr) != 1) return false;
  auto const [fd, error] = dial(to, wait);
  if (fd < 0) return false;
  ::close(fd);
  return error == ECONNREFUSED;
}

}  // namespace convoy::comm::detail
