// Whether a ZeroMQ socket's peer dropped its connection: cppzmq's monitor on the socket, read from
// the test's thread (as zmq_ps::HandshakeWatch watches a worker's handshakes). For tests of
// servers that must disconnect a peer (a frame past their cap).
#pragma once

#include <chrono>
#include <string>
#include <zmq.hpp>

namespace convoy::testing {

/// Watches `socket`'s disconnections from now on; `name` makes the monitor's endpoint unique.
class DisconnectWatch : public zmq::monitor_t {
 public:
  DisconnectWatch(zmq::socket_t& socket, std::string const& name) {
    init(socket, "inproc://convoy-test-watch-" + name, ZMQ_EVENT_DISCONNECTED);
  }

  /// True once the peer closed the connection, within `limit`.
  bool disconnected_within(std::chrono::milliseconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    while (!disconnected_ && std::chrono::steady_clock::now() < until) check_event(50);
    return disconnected_;
  }

 private:
  void on_event_disconnected(zmq_event_t const&, char const*) override { disconnected_ = true; }
  bool disconnected_ = false;
};

}  // namespace convoy::testing
