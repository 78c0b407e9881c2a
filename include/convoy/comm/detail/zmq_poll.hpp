// zmq_poll that a signal does not end. cppzmq's poll throws on EINTR, which any signal handler of
// the program (a preemption notice on SIGUSR1, SIGCHLD from a child it started) causes in
// whichever thread the kernel picks to run it: on one of convoy's own threads, with nothing there
// to catch it, the whole process would end in std::terminate.
#pragma once

#include <zmq.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>

namespace convoy::comm::detail {

/// zmq::poll(items, count, timeout), except that a signal only shortens the wait: it is waited
/// again for what is left of `timeout`. Returns the number of items ready (0: none in time);
/// throws zmq::error_t on any other error.
inline int poll(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout) {
  auto const until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto const left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   until - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    int const ready = ::zmq_poll(items, static_cast<int>(count), static_cast<long>(left.count()));
    if (ready >= 0) return ready;
    if (::zmq_errno() != EINTR) throw zmq::error_t();
    if (left.count() == 0) {
      for (std::size_t i = 0; i < count; ++i) items[i].revents = 0;
      return 0;
    }
  }
}

}  // namespace convoy::comm::detail
