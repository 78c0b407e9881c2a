// Whether a ZeroMQ socket's peer dropped its connection: a monitor on the socket, read from the
// test's thread. For tests of servers that must disconnect a peer (a frame past their cap).
#pragma once

#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <zmq.hpp>

namespace convoy::testing {

/// Watches `socket`'s disconnections from now on; `name` makes the monitor's endpoint unique.
class DisconnectWatch {
 public:
  DisconnectWatch(zmq::context_t& context, zmq::socket_t& socket, std::string const& name)
      : events_(context, zmq::socket_type::pair) {
    std::string const endpoint = "inproc://convoy-test-watch-" + name;
    if (::zmq_socket_monitor(socket.handle(), endpoint.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
      throw std::runtime_error("cannot monitor the socket: " + std::string(::zmq_strerror(errno)));
    }
    events_.set(zmq::sockopt::linger, 0);
    events_.connect(endpoint);
  }

  /// True once the peer closed the connection, within `limit`.
  bool disconnected_within(std::chrono::milliseconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      zmq::pollitem_t item{events_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      zmq::message_t event, endpoint;
      if (!events_.recv(event) || !events_.recv(endpoint)) continue;
      std::uint16_t kind = 0;
      if (event.size() >= sizeof kind) std::memcpy(&kind, event.data(), sizeof kind);
      if (kind == ZMQ_EVENT_DISCONNECTED) return true;
    }
    return false;
  }

 private:
  zmq::socket_t events_;
};

}  // namespace convoy::testing
