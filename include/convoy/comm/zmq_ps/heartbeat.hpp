// Liveness of the parameter server's connections: ZeroMQ heartbeats (ZMTP PING/PONG), so a shard
// and a worker notice a peer that went silent (a stopped process, a cut network) within a bound
// the user sets (comm::ZmqPs::heartbeat), rather than only through the Sync policy's timeout.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <zmq.hpp>

namespace convoy::comm::zmq_ps {

/// ZeroMQ heartbeats on `socket`: it pings every quarter of `timeout` and drops a connection
/// that stays silent for `timeout`, and asks its peer to do the same (TTL); 0: off.
inline void set_heartbeat(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return;
  auto const ms = static_cast<int>(std::min<std::int64_t>(timeout.count(), 6553599));
  socket.set(zmq::sockopt::heartbeat_ivl, std::max(1, ms / 4));
  socket.set(zmq::sockopt::heartbeat_timeout, ms);
  socket.set(zmq::sockopt::heartbeat_ttl, std::max(100, ms));  // ZeroMQ counts it in 100 ms
}

}  // namespace convoy::comm::zmq_ps
