// Socket addresses as text, and a TCP connection attempted for a bounded time: what the liveness
// board's connection cap, the check that nothing listens at an address any more and the Gloo
// mesh's check of its connections' ends share.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace convoy::comm::detail {

/// The IP address of `a` (IPv4 or IPv6) as text; "?" for another family.
inline std::string ip_text(::sockaddr_storage const& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<::sockaddr_in const&>(a).sin_addr, text, sizeof text);
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<::sockaddr_in6 const&>(a).sin6_addr, text, sizeof text);
  }
  return text;
}

/// "host:port" of `a`, "[host]:port" for IPv6.
inline std::string endpoint_text(::sockaddr_storage const& a) {
  if (a.ss_family == AF_INET6) {
    return "[" + ip_text(a) +
           "]:" + std::to_string(ntohs(reinterpret_cast<::sockaddr_in6 const&>(a).sin6_port));
  }
  return ip_text(a) + ":" +
         std::to_string(ntohs(reinterpret_cast<::sockaddr_in const&>(a).sin_port));
}

/// Whether `a` and `b` are the same address and port (IPv4 or IPv6).
inline bool same_endpoint(::sockaddr_storage const& a, ::sockaddr_storage const& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto const &x = reinterpret_cast<::sockaddr_in const&>(a),
               &y = reinterpret_cast<::sockaddr_in const&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  auto const &x = reinterpret_cast<::sockaddr_in6 const&>(a),
             &y = reinterpret_cast<::sockaddr_in6 const&>(b);
  return x.sin6_port == y.sin6_port &&
         std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
}

/// A TCP connection to `to` attempted for `wait` at most: its descriptor, which the caller closes
/// (-1 when no socket could be made), and the connect's error (0 when it was taken or is still
/// under way at `wait`).
struct Dialed {
  int fd = -1;
  int error = 0;
};
inline Dialed dial(::sockaddr_storage const& to, std::chrono::milliseconds wait) {
  Dialed dialed;
  dialed.fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (dialed.fd < 0) return dialed;
  ::socklen_t const size = to.ss_family == AF_INET ? sizeof(::sockaddr_in) : sizeof(::sockaddr_in6);
  if (::connect(dialed.fd, reinterpret_cast<::sockaddr const*>(&to), size) == 0) return dialed;
  dialed.error = errno;
  if (dialed.error != EINPROGRESS) return dialed;
  dialed.error = 0;
  ::pollfd item{.fd = dialed.fd, .events = POLLOUT, .revents = 0};
  if (::poll(&item, 1, static_cast<int>(wait.count())) == 1) {
    ::socklen_t length = sizeof dialed.error;
    ::getsockopt(dialed.fd, SOL_SOCKET, SO_ERROR, &dialed.error, &length);
  }
  return dialed;
}

}  // namespace convoy::comm::detail
