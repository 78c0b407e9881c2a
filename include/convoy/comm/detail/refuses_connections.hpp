// Whether nothing listens at a TCP address any more: the kernel refuses a connection to a port no
// socket holds, at once, and a process's sockets go with it when it ends, however it ends. A
// stopped process still holds its ports (the kernel takes connections for it), and a host that
// does not answer refuses nothing, so neither is taken for gone here.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

#include "../../cluster/address.hpp"
#include "../../cluster/host_lookup.hpp"

namespace convoy::comm::detail {

/// True when a TCP connection to `address` ("host:port" of an IPv4 host or a name that resolves
/// to one) is refused within `wait`; false when it is taken or times out, or the address does not
/// parse or resolve. The connection, when taken, is closed at once.
inline bool refuses_connections(std::string const& address, std::chrono::milliseconds wait) {
  std::string numeric;
  sockaddr_in to{};
  try {
    auto const parsed = parse_address(address, "a peer's address");
    if (lookup_ipv4(parsed.host, &numeric) != 0) return false;
    to.sin_port = htons(static_cast<std::uint16_t>(parsed.port));
  } catch (Error const&) {
    return false;
  }
  to.sin_family = AF_INET;
  if (::inet_pton(AF_INET, numeric.c_str(), &to.sin_addr) != 1) return false;
  int const fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  int error = 0;
  if (::connect(fd, reinterpret_cast<sockaddr const*>(&to), sizeof to) != 0) {
    error = errno;
    if (error == EINPROGRESS) {
      pollfd item{fd, POLLOUT, 0};
      error = 0;
      if (::poll(&item, 1, static_cast<int>(wait.count())) == 1) {
        socklen_t length = sizeof error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      }
    }
  }
  ::close(fd);
  return error == ECONNREFUSED;
}

}  // namespace convoy::comm::detail
