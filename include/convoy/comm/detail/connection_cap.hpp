// The connections a listening ZeroMQ socket holds, and a cap on them. A ROUTER takes every TCP
// connection it is offered and keeps it, each with a file descriptor, so idle strangers could take
// the whole file limit of the process it lives in (2000 of them under a 1024-descriptor limit once
// made the next checkpoint fail with "Too many open files"). A socket monitor reports each accept
// and each close; beyond the cap, the oldest connection that has not identified itself (no valid
// message of this run came on it) is shut down, or the new one when every open connection has.
// Used by a parameter-server shard and by the liveness board (comm/bootstrap/liveness.hpp).
#pragma once

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../core/error.hpp"
#include "sockets.hpp"

namespace convoy::comm::detail {

/// Descriptors the process keeps for itself when a cap is taken from its file limit.
inline constexpr std::size_t reserved_descriptors = 64;

/// The file limit (RLIMIT_NOFILE) less reserved_descriptors; what a cap may take at most.
inline std::size_t file_room() {
  ::rlimit limit{};
  std::size_t const files =
      ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
          ? static_cast<std::size_t>(limit.rlim_cur)
          : std::size_t{1} << 20;
  return files > reserved_descriptors ? files - reserved_descriptors : 0;
}

/// The address of the peer of connection `fd`, as text ("?" when unknown).
inline std::string peer_address(int fd) {
  ::sockaddr_storage address{};
  ::socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<::sockaddr*>(&address), &length) != 0) return "?";
  return ip_text(address);
}

/// A socket that hears of `socket`'s accepted and closed connections, through an inproc
/// endpoint named `watch` (unique in `context`). `who` names the owner in the error.
inline zmq::socket_t watch_connections(zmq::context_t& context, zmq::socket_t& socket,
                                       std::string const& watch, std::string const& who) {
  zmq::socket_t events(context, zmq::socket_type::pair);
  if (::zmq_socket_monitor(socket.handle(), watch.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw Error("convoy: " + who +
                " cannot watch its connections: " + ::zmq_strerror(::zmq_errno()));
  }
  events.set(zmq::sockopt::linger, 0);
  events.connect(watch);
  return events;
}

/// One event of such a monitor: a connection accepted, or closed.
struct ConnectionEvent {
  bool accepted = false;
  int fd = -1;
};

/// The next event waiting on `events`, if any.
inline std::optional<ConnectionEvent> next_connection_event(zmq::socket_t& events) {
  std::vector<zmq::message_t> event;
  if (!zmq::recv_multipart(events, std::back_inserter(event), zmq::recv_flags::dontwait)) {
    return std::nullopt;
  }
  ConnectionEvent out;
  if (event.empty() || event[0].size() < 6) return out;  // fd -1: nothing to do
  std::uint16_t kind = 0;
  std::int32_t fd = 0;
  std::memcpy(&kind, event[0].data(), 2);
  std::memcpy(&fd, static_cast<char const*>(event[0].data()) + 2, 4);
  out.accepted = kind == ZMQ_EVENT_ACCEPTED;
  out.fd = fd;
  return out;
}

/// The open connections, in the order they were accepted, and the cap on them.
class ConnectionCap {
 public:
  explicit ConnectionCap(std::size_t cap = file_room()) : cap_(cap) {}

  std::size_t cap() const { return cap_; }

  /// A connection shut down to stay within the cap.
  struct Closed {
    int fd = -1;
    std::string address;  ///< its peer's, read before the shutdown
    bool newest = false;  ///< the one just accepted: every other one had identified itself
  };
  /// Connection `fd` was accepted. Beyond the cap, shuts down the oldest open connection for
  /// which `identified` is false, or `fd` itself when there is none, and says which; ZeroMQ then
  /// closes it and frees the descriptor.
  std::optional<Closed> accepted(int fd, std::function<bool(int)> const& identified) {
    open_[fd] = ++accepts_;
    if (open_.size() <= cap_) return std::nullopt;
    int victim = fd;
    std::uint64_t oldest = accepts_;
    for (auto const& [open, order] : open_) {
      if (order < oldest && !identified(open)) {
        victim = open;
        oldest = order;
      }
    }
    open_.erase(victim);
    Closed closed{victim, peer_address(victim), victim == fd};
    ::shutdown(victim, SHUT_RDWR);
    return closed;
  }
  /// Connection `fd` closed.
  void closed(int fd) { open_.erase(fd); }

 private:
  std::size_t cap_;
  std::uint64_t accepts_ = 0;
  std::map<int, std::uint64_t> open_;  // descriptor -> accept order
};

}  // namespace convoy::comm::detail
