// How the ranks of an NCCL run agree on its unique id before any of them can talk NCCL: rank 0
// makes the id and serves it through the cluster's rendezvous (comm/bootstrap/rendezvous.hpp: over
// ZeroMQ at its own address, the coordinator for every launcher the cluster resolver knows); the
// others ask for it, retrying while rank 0 starts, within a timeout. The id is an opaque blob here
// (ncclUniqueId is 128 bytes): this header needs ZeroMQ (convoy::zmq_ps), not NCCL.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../bootstrap/rendezvous.hpp"

namespace convoy::comm::nccl {

using BootstrapOptions = bootstrap::Options;

namespace detail {
inline constexpr std::string_view bootstrap_tag = "convoy-nccl-id/1";
inline constexpr std::string_view unique_id = "the NCCL unique id";
}  // namespace detail

/// Rank 0's side: serves `id` at `address` ("host:port") until each of ranks 1..world_size-1 has
/// fetched it. Blocks. Throws TimeoutError naming the ranks that never asked within
/// options.timeout, and Error when `address` cannot be bound. A request that does not speak this
/// protocol gets an error answer and serving goes on.
inline void serve_unique_id(std::string const& address, std::span<std::byte const> id,
                            int world_size, BootstrapOptions const& options = {}) {
  std::vector<std::vector<std::byte>> const answer{{id.begin(), id.end()}};
  bootstrap::serve(address, world_size, options, detail::bootstrap_tag, detail::unique_id,
                   [&](int, std::span<std::byte const>) { return answer; });
}

/// Rank `rank`'s side: asks rank 0 at `address` for the id, expecting `size` bytes. Blocks; asks
/// again on a fresh connection every options.retry while rank 0 is not there yet. Throws
/// TimeoutError naming the rank and the address after options.timeout, ProtocolError when rank 0
/// answers with an error or an id of another size.
inline std::vector<std::byte> fetch_unique_id(std::string const& address, int rank,
                                              std::size_t size,
                                              BootstrapOptions const& options = {}) {
  auto const answer =
      bootstrap::ask(address, rank, {}, options, detail::bootstrap_tag, detail::unique_id);
  std::string const from = "convoy: rank " + std::to_string(rank) + " asked rank 0 at " + address +
                           " for the NCCL unique id";
  if (answer.size() != 1) throw ProtocolError(from + "; the answer is not one id");
  if (answer[0].size() != size) {
    throw ProtocolError(from + " and got " + std::to_string(answer[0].size()) + " bytes, not " +
                        std::to_string(size));
  }
  auto const* bytes = answer[0].data<std::byte>();
  return std::vector<std::byte>(bytes, bytes + size);
}

/// Every training rank of `cluster` gets the same id: rank 0 (worker_rank() 0) calls `make_id`
/// and serves the result at its own address until every other rank has it; the others fetch
/// `size` bytes from there. A single process calls make_id. Blocks; throws as the two above, and
/// ClusterError for a ps or evaluator task, which takes no part in a collective.
inline std::vector<std::byte> share_unique_id(
    Cluster const& cluster, std::size_t size,
    std::function<std::vector<std::byte>()> const& make_id, BootstrapOptions const& options = {}) {
  if (cluster.single_process()) return make_id();
  int const rank = cluster.worker_rank();
  if (rank < 0) {
    throw ClusterError("convoy: task " + cluster.job + "[" + std::to_string(cluster.index) +
                       "] takes no part in an NCCL collective; only the chief and the workers do");
  }
  std::string const& coordinator = cluster.worker_address(0);
  BootstrapOptions run_options = options;
  if (run_options.run.empty()) run_options.run = bootstrap::run_identity(cluster);
  if (rank > 0) return fetch_unique_id(coordinator, rank, size, run_options);
  auto id = make_id();
  if (id.size() != size) {
    throw Error("convoy: the NCCL unique id made by rank 0 has " + std::to_string(id.size()) +
                " bytes, not " + std::to_string(size));
  }
  serve_unique_id(coordinator, id, static_cast<int>(cluster.worker_count()), run_options);
  return id;
}

}  // namespace convoy::comm::nccl
