// A shard of a small model's single piece serving on a free loopback port, and a peer to talk to
// it: what the tests of a live shard (tests/unit/comm/test_zmq_ps_*.cpp) each set up.
#pragma once

#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "processes.hpp"

namespace convoy::testing {

struct ShardBench {
  nn::Mlp model{{6, 4, 3}};
  place::ShardMap map = place::GreedyBySize{}.assign(model.variables(), 1);
  std::vector<place::Piece const*> pieces = map.pieces_of(0);
  optim::Optimizer optimizer = optim::Sgd{0.1f};
  sync::Asynchronous policy{.timeout = std::chrono::seconds(20)};
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());

  /// The run's fingerprint for `workers`, as every worker's requests carry it.
  std::uint64_t fingerprint(std::size_t workers) const {
    return comm::zmq_ps::fingerprint(pieces, optimizer, policy, 1, workers);
  }
  /// Shard::Options for this bench's endpoint; the caller adds its own knobs.
  comm::zmq_ps::Shard<sync::Asynchronous>::Options options(std::size_t workers,
                                                           std::ostream* log) const {
    return {.index = 0, .shards = 1, .workers = workers, .endpoint = endpoint, .log = log};
  }
};

/// A DEALER connected to `endpoint`, which waits at most 10 s for an answer and never lingers.
inline zmq::socket_t shard_peer(zmq::context_t& context, std::string const& endpoint) {
  zmq::socket_t peer(context, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(endpoint);
  return peer;
}

}  // namespace convoy::testing
