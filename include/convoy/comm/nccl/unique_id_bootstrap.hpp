// How the ranks of an NCCL run agree on its unique id before any of them can talk NCCL: rank 0
// makes the id and serves it over ZeroMQ at its own address in the cluster (the coordinator, for
// every launcher the cluster resolver knows); the others ask for it, retrying while rank 0 starts,
// within a timeout. The id is an opaque blob here (ncclUniqueId is 128 bytes): this header needs
// ZeroMQ (convoy::zmq_ps), not NCCL.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"

namespace convoy::comm::nccl {

struct BootstrapOptions {
  /// How long rank 0 serves (until every other rank has the id) and the others ask.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  /// A rank without an answer after this long asks again on a fresh connection.
  std::chrono::milliseconds retry{std::chrono::milliseconds(500)};
};

namespace detail {
inline constexpr std::string_view bootstrap_tag = "convoy-nccl-id/1";
inline std::string endpoint(std::string const& address) { return "tcp://" + address; }
inline std::string frame_text(zmq::message_t const& m) { return std::string(m.to_string_view()); }
}  // namespace detail

/// Rank 0's side: serves `id` at `address` ("host:port") until each of ranks 1..world_size-1 has
/// fetched it. Blocks. Throws TimeoutError naming the ranks that never asked within
/// options.timeout, and Error when `address` cannot be bound. A request that does not speak this
/// protocol gets an error answer and serving goes on.
inline void serve_unique_id(std::string const& address, std::span<std::byte const> id,
                            int world_size, BootstrapOptions const& options = {}) {
  if (world_size <= 1) return;
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 2000);  // the last answers leave before the socket closes
  try {
    socket.bind(detail::endpoint(address));
  } catch (zmq::error_t const& e) {
    throw Error("convoy: rank 0 cannot serve the NCCL unique id at " + address + ": " + e.what());
  }
  std::set<int> waiting;
  for (int r = 1; r < world_size; ++r) waiting.insert(r);
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool lingering = false;
  for (;;) {
    auto const now = std::chrono::steady_clock::now();
    if (waiting.empty() && !lingering) {
      // A rank may have given up on the connection this answer went to and be asking again on a
      // fresh one: answer for two more retry intervals.
      lingering = true;
      deadline = now + 2 * options.retry;
    }
    if (lingering && now >= deadline) return;
    if (now >= deadline) {
      std::string missing;
      for (int r : waiting) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw TimeoutError("convoy: rank 0 served the NCCL unique id at " + address + " for " +
                         std::to_string(options.timeout.count()) + " ms, but rank(s) " + missing +
                         " of " + std::to_string(world_size) +
                         " never asked for it; are they started, and can they reach that address?");
    }
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(100)));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    std::vector<zmq::message_t> request;
    (void)zmq::recv_multipart(socket, std::back_inserter(request));
    int rank = -1;
    if (request.size() == 2 && detail::frame_text(request[0]) == detail::bootstrap_tag) {
      auto const text = detail::frame_text(request[1]);
      if (!text.empty() && text.size() < 8 && text.find_first_not_of("0123456789") == text.npos)
        rank = std::stoi(text);
    }
    if (rank < 1 || rank >= world_size) {
      socket.send(zmq::str_buffer("error"), zmq::send_flags::sndmore);
      std::string const why = "rank 0 at " + address + " serves ranks 1.." +
                              std::to_string(world_size - 1) + " speaking " +
                              std::string(detail::bootstrap_tag) + "; the request was not that";
      socket.send(zmq::buffer(why), zmq::send_flags::none);
      continue;
    }
    socket.send(zmq::buffer(detail::bootstrap_tag), zmq::send_flags::sndmore);
    socket.send(zmq::const_buffer(id.data(), id.size()), zmq::send_flags::none);
    waiting.erase(rank);
  }
}

/// Rank `rank`'s side: asks rank 0 at `address` for the id, expecting `size` bytes. Blocks; asks
/// again on a fresh connection every options.retry while rank 0 is not there yet. Throws
/// TimeoutError naming the rank and the address after options.timeout, ProtocolError when rank 0
/// answers with an error or an id of another size.
inline std::vector<std::byte> fetch_unique_id(std::string const& address, int rank,
                                              std::size_t size,
                                              BootstrapOptions const& options = {}) {
  zmq::context_t context;
  auto const deadline = std::chrono::steady_clock::now() + options.timeout;
  int attempts = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ++attempts;
    zmq::socket_t socket(context, zmq::socket_type::req);
    socket.set(zmq::sockopt::linger, 0);
    socket.connect(detail::endpoint(address));
    std::string const rank_text = std::to_string(rank);
    socket.send(zmq::buffer(detail::bootstrap_tag), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(rank_text), zmq::send_flags::none);
    auto const now = std::chrono::steady_clock::now();
    auto const wait = std::min(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), options.retry);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::max(wait, std::chrono::milliseconds(1)));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;  // not there yet: a fresh socket asks again
    std::vector<zmq::message_t> answer;
    (void)zmq::recv_multipart(socket, std::back_inserter(answer));
    std::string const from =
        "convoy: rank " + rank_text + " asked rank 0 at " + address + " for the NCCL unique id";
    if (answer.size() == 2 && detail::frame_text(answer[0]) == "error")
      throw ProtocolError(from + " and was refused: " + detail::frame_text(answer[1]));
    if (answer.size() != 2 || detail::frame_text(answer[0]) != detail::bootstrap_tag)
      throw ProtocolError(from + "; the answer does not speak " +
                          std::string(detail::bootstrap_tag));
    if (answer[1].size() != size) {
      throw ProtocolError(from + " and got " + std::to_string(answer[1].size()) + " bytes, not " +
                          std::to_string(size));
    }
    auto const* bytes = answer[1].data<std::byte>();
    return std::vector<std::byte>(bytes, bytes + size);
  }
  throw TimeoutError("convoy: rank " + std::to_string(rank) +
                     " could not fetch the NCCL unique id from rank 0 at " + address +
                     ": no answer within " + std::to_string(options.timeout.count()) + " ms (" +
                     std::to_string(attempts) +
                     " attempts); is rank 0 running, and is its address reachable from here?");
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
  if (rank > 0) return fetch_unique_id(coordinator, rank, size, options);
  auto id = make_id();
  if (id.size() != size) {
    throw Error("convoy: the NCCL unique id made by rank 0 has " + std::to_string(id.size()) +
                " bytes, not " + std::to_string(size));
  }
  serve_unique_id(coordinator, id, static_cast<int>(cluster.worker_count()), options);
  return id;
}

}  // namespace convoy::comm::nccl
