// What a parameter-server shard is told when it starts (comm::ZmqPs fills it in for each ps task).
#pragma once

#include <chrono>
#include <cstddef>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "../../core/variables.hpp"
#include "security.hpp"
#include "shard_cpu.hpp"

namespace convoy::comm::zmq_ps {

struct ShardOptions {
  std::size_t index = 0;
  std::size_t shards = 1;
  std::size_t workers = 1;
  std::string endpoint;  ///< "tcp://host:port" to bind
  std::ostream* log = &std::clog;
  ServerSecurity security{};  ///< CURVE keys and authorized workers, or plaintext
  /// ZeroMQ heartbeats: a worker connection silent this long is dropped and logged; 0: off.
  std::chrono::milliseconds heartbeat{0};
  /// The model's state variables (Variables::state_ranges), in its flat arena: applied as
  /// `w -= scale * g` instead of by the optimizer.
  std::vector<ArenaRange> state_ranges{};
  /// Open connections the shard keeps; one more is closed at once, with a line per peer and
  /// interval. 0: the file limit (RLIMIT_NOFILE) less reserved_descriptors, so that idle
  /// connections can never take the descriptors a checkpoint part needs.
  std::size_t max_connections = 0;
  /// Where the serving thread was put (ShardCpu), said in the first log line.
  ShardCpuPlan cpu{};
};

}  // namespace convoy::comm::zmq_ps
