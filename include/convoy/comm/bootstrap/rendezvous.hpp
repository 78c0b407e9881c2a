// How the processes of a collective run find each other before any collective library can talk:
// rank 0 serves a rendezvous over ZeroMQ at its own address in the cluster (the coordinator, for
// every launcher the cluster resolver knows) and the others ask it, retrying on fresh connections
// while rank 0 starts, within a timeout. NCCL's unique id is served this way
// (comm/nccl/unique_id_bootstrap.hpp), and so are the Gloo transport's addresses, gathered from
// every rank (gather()). Every request and answer carries the run's identity (run_identity.hpp):
// rank 0 answers only the processes of its run, and a rank takes answers only from its run's rank
// 0. Plain C++ over ZeroMQ.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../cluster/cluster.hpp"
#include "../../cluster/host_lookup.hpp"
#include "../../core/error.hpp"
#include "../detail/zmq_poll.hpp"
#include "run_identity.hpp"
#include "run_key.hpp"

namespace convoy::comm::bootstrap {

struct Options {
  /// How long rank 0 serves (until every other rank has its answer) and the others ask.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  /// A rank without an answer after this long asks again, on a fresh connection.
  std::chrono::milliseconds retry{std::chrono::milliseconds(500)};
  /// The largest frame rank 0 takes (a rank's payload: an NCCL unique id, a Gloo address); a peer
  /// that sends a larger one is disconnected by ZeroMQ before the frame is allocated.
  std::int64_t max_request_bytes = 64 * 1024;
  /// The run's identity (run_identity()), in every request and answer; gather() and the NCCL id's
  /// bootstrap fill it in from the cluster when empty.
  std::string run{};
};

/// ask()'s TimeoutError when rank 0 answered within the timeout but was still waiting for other
/// ranks: it is there, and a rank may ask again at once.
struct StillWaiting : TimeoutError {
  using TimeoutError::TimeoutError;
};

namespace detail {
inline std::string endpoint(std::string const& address) { return "tcp://" + address; }
inline std::string frame_text(zmq::message_t const& m) { return std::string(m.to_string_view()); }
inline std::string rank_list(std::set<int> const& ranks) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return list;
}
// Ranks 1..world_size-1 that are not in `asked`.
inline std::set<int> not_asked(std::set<int> const& asked, int world_size) {
  std::set<int> never;
  for (int r = 1; r < world_size; ++r)
    if (!asked.contains(r)) never.insert(r);
  return never;
}

// A request on `socket` within `left` into `request`; false when none came. Never blocks: a peer
// of another socket type (the liveness reporters, which connect to this address once the
// rendezvous is over) makes the socket readable with nothing it takes.
inline bool receive_request(zmq::socket_t& socket, std::chrono::steady_clock::duration left,
                            std::vector<zmq::message_t>& request) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  auto const wait = std::chrono::duration_cast<std::chrono::milliseconds>(left);
  comm::detail::poll(&item, 1, std::min(wait, std::chrono::milliseconds(100)));
  if ((item.revents & ZMQ_POLLIN) == 0) return false;
  return zmq::recv_multipart(socket, std::back_inserter(request), zmq::recv_flags::dontwait)
      .has_value();
}

// The rank a request [protocol, rank, run, payload] names, in any protocol; -1 when it names none.
inline int asking_rank(std::vector<zmq::message_t> const& request) {
  if (request.size() != 4) return -1;
  auto const text = frame_text(request[1]);
  if (text.empty() || text.size() >= 8 || text.find_first_not_of("0123456789") != text.npos)
    return -1;
  return std::stoi(text);
}
// Whether two protocols are rounds of one exchange: the same first word.
inline bool same_exchange(std::string_view a, std::string_view b) {
  return a.substr(0, a.find(' ')) == b.substr(0, b.find(' '));
}
// Whether `request` comes from a rank of an earlier generation of options.run's group, in a round
// of the same exchange.
inline bool left_behind(std::vector<zmq::message_t> const& request, std::string_view protocol,
                        std::string_view run) {
  return asking_rank(request) >= 1 && same_exchange(frame_text(request[0]), protocol) &&
         earlier_generation(request[2].to_string_view(), run);
}
// The rank a request names; -1 when it does not speak `protocol`.
inline int requested_rank(std::vector<zmq::message_t> const& request, std::string_view protocol) {
  if (request.size() != 4 || frame_text(request[0]) != protocol) return -1;
  return asking_rank(request);
}

// Why a message of another run came, as `us` (this process, "rank 0") sees `them` ("rank 1"):
// for the log and the error answer.
inline std::string other_run(std::string_view theirs, std::string_view ours, std::string const& us,
                             std::string const& them) {
  bool const token = ours.starts_with("token:"), their_token = theirs.starts_with("token:");
  if (token != their_token) {
    return "CONVOY_RUN_TOKEN is set for " + (token ? us : them) + " and not for " +
           (token ? them : us) + "; give every task of a run the same";
  }
  return token ? "its CONVOY_RUN_TOKEN or cluster differs"
               : "its cluster differs (another run, or one left over on these ports)";
}

// Answers `first`, the run, then `frames`, as one message.
inline void send_answer(zmq::socket_t& socket, std::string_view first, std::string_view run,
                        std::vector<std::vector<std::byte>> const& frames) {
  socket.send(zmq::buffer(first), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(run), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  for (std::size_t f = 0; f < frames.size(); ++f) {
    socket.send(zmq::const_buffer(frames[f].data(), frames[f].size()),
                f + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}
inline void send_answer(zmq::socket_t& socket, std::string_view first, std::string_view text) {
  socket.send(zmq::buffer(first), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(text), zmq::send_flags::none);
}

// Refuses `request`, of another run than `run`, saying why; the first such (`first`) is logged
// with its peer's address, later ones are not.
inline void refuse_other_run(zmq::socket_t& socket, std::vector<zmq::message_t>& request,
                             std::string const& address, std::string_view run, bool first) {
  auto const rank = std::to_string(asking_rank(request));
  auto const why = other_run(request[2].to_string_view(), run, "rank 0", "rank " + rank);
  if (first) {
    char const* peer = request[0].gets("Peer-Address");
    std::clog << "convoy: rank 0 at " << address << " refused a request for rank " << rank
              << " from " << (peer ? peer : "a peer") << " of another run: " << why
              << " (later ones are refused without a line)" << std::endl;
  }
  send_answer(socket, "error", "rank 0 at " + address + " serves another run: " + why);
}
// Tells a rank of an earlier generation of `run`'s group (left_behind()) that the group went on
// without it: [went-on, run, why], which ask() turns into LeftBehind.
inline void tell_left_behind(zmq::socket_t& socket, std::vector<zmq::message_t> const& request,
                             std::string const& address, std::string_view run) {
  auto const why = "rank 0 at " + address + " meets generation " +
                   std::to_string(*generation_of(run)) + " of the run's group; the asking rank " +
                   std::to_string(asking_rank(request)) + " belongs to generation " +
                   std::to_string(*generation_of(request[2].to_string_view())) +
                   ", which went on without it";
  socket.send(zmq::str_buffer("went-on"), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(run), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(why), zmq::send_flags::none);
}
}  // namespace detail

/// A round that rank 0 served before the one it serves now (gather() called again): its protocol
/// and answer, for a rank whose answer to it was lost on the way and that asks again late.
struct Round {
  std::string protocol;
  std::vector<std::vector<std::byte>> frames;
};

namespace detail {
// A request of the run for another round of the exchange rank 0 serves (`protocol`'s first word):
// for `previous`, its answer again; for the next, from a rank that had its answer (not in
// `waiting`), "wait" (it asks again shortly, and the next serve() answers it). False, having
// answered nothing, for any other request.
inline bool answered_another_round(zmq::socket_t& socket,
                                   std::vector<zmq::message_t> const& request, int world_size,
                                   std::string const& run, std::string_view protocol,
                                   Round const* previous, std::set<int> const& waiting,
                                   std::string const& address) {
  int const rank = asking_rank(request);
  if (rank < 1 || rank >= world_size || request[2].to_string_view() != run ||
      !same_exchange(frame_text(request[0]), protocol)) {
    return false;
  }
  if (previous && frame_text(request[0]) == previous->protocol) {
    send_answer(socket, previous->protocol, run, previous->frames);
    return true;
  }
  if (waiting.contains(rank)) return false;
  send_answer(socket, "wait", "rank 0 at " + address + " is ending its last round");
  return true;
}
}  // namespace detail

/// What rank 0 answers rank `rank`, which sent `payload`: the frames of its final answer, or
/// nothing while that rank must ask again later (it is told which ranks rank 0 still waits for).
using Answer = std::function<std::optional<std::vector<std::vector<std::byte>>>(
    int rank, std::span<std::byte const> payload)>;

/// Rank 0's side: serves `protocol` at `address` ("host:port") until each of ranks
/// 1..world_size-1 has had its final answer. Blocks. Throws TimeoutError naming the ranks that
/// never asked within options.timeout, and Error when `address` cannot be bound. A request that
/// does not speak `protocol`, or comes from another run than options.run, gets an error answer
/// (the first of another run is logged; one of an earlier generation of this run's group is told
/// the group went on without it) and serving goes on. `what` names what is served,
/// for messages ("the NCCL unique id"). Rounds of one exchange share their protocol's first word
/// ("convoy-gloo-mesh/2 ends #1"): a rank of the run that had its answer and asks for the next
/// round is told to wait, and one that asks for `previous` again gets its answer.
inline void serve(std::string const& address, int world_size, Options const& options,
                  std::string_view protocol, std::string_view what, Answer const& answer,
                  Round const* previous = nullptr) {
  if (world_size <= 1) return;
  zmq::context_t context;
  auto const key = run_key();
  std::optional<KeyGate> gate;  // before the socket: it checks the keys of its peers
  if (key) gate.emplace(context, *key, "rank 0 at " + address);
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 2000);  // the last answers leave before the socket closes
  socket.set(zmq::sockopt::maxmsgsize, options.max_request_bytes);
  serve_under(socket, key);
  try {
    socket.bind(zmq_bind_endpoint(address, "rank 0's address"));
  } catch (zmq::error_t const& e) {
    throw Error("convoy: rank 0 cannot serve " + std::string(what) + " at " + address + ": " +
                e.what());
  }
  std::int64_t strangers = 0;  // requests of another run
  std::set<int> asked;         // ranks heard from
  std::set<int> waiting;       // ranks without their final answer
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
      auto const never = detail::not_asked(asked, world_size);
      // Every rank asked, but some never came back for the answer (told to wait, then gone).
      std::string const why =
          never.empty() ? " asked, were told to wait for the others and never asked again; are "
                          "they still running?"
                        : " never asked for it; are they started, and can they reach that address?";
      throw TimeoutError("convoy: rank 0 served " + std::string(what) + " at " + address + " for " +
                         std::to_string(options.timeout.count()) + " ms, but rank(s) " +
                         detail::rank_list(never.empty() ? waiting : never) + " of " +
                         std::to_string(world_size) + why + run_key_hint(key));
    }
    std::vector<zmq::message_t> request;
    if (!detail::receive_request(socket, deadline - now, request)) continue;
    int const rank = detail::requested_rank(request, protocol);
    if (detail::left_behind(request, protocol, options.run)) {
      // A member of a group the others have since left behind (stopped before its meeting; its
      // rank there may be past this group's size, and the round it asks for over): told so, it
      // knocks to be taken in as a process started again.
      detail::tell_left_behind(socket, request, address, options.run);
      continue;
    }
    if (rank < 0 && detail::answered_another_round(socket, request, world_size, options.run,
                                                   protocol, previous, waiting, address)) {
      continue;
    }
    if (rank < 1 || rank >= world_size) {
      detail::send_answer(socket, "error",
                          "rank 0 at " + address + " serves ranks 1.." +
                              std::to_string(world_size - 1) + " speaking " +
                              std::string(protocol) + "; the request was not that");
      continue;
    }
    if (request[2].to_string_view() != options.run) {
      detail::refuse_other_run(socket, request, address, options.run, strangers++ == 0);
      continue;
    }
    asked.insert(rank);
    auto const* bytes = request[3].data<std::byte>();
    auto const reply = answer(rank, std::span<std::byte const>(bytes, request[3].size()));
    if (!reply) {
      detail::send_answer(socket, "wait", detail::rank_list(detail::not_asked(asked, world_size)));
      continue;
    }
    detail::send_answer(socket, protocol, options.run, *reply);
    waiting.erase(rank);
  }
}

/// Rank `rank`'s side: sends `payload` to rank 0 at `address` until it gives its final answer,
/// whose frames it returns. Blocks; asks again on a fresh connection every options.retry while
/// rank 0 is not there yet or waits for other ranks. Throws TimeoutError naming this rank, the
/// address and the ranks rank 0 still waited for after options.timeout, ProtocolError when rank 0
/// answers with an error, in another protocol or for another run, LeftBehind when it serves a
/// later generation of this run's group.
inline std::vector<zmq::message_t> ask(std::string const& address, int rank,
                                       std::span<std::byte const> payload, Options const& options,
                                       std::string_view protocol, std::string_view what) {
  zmq::context_t context;
  auto const key = run_key();
  auto const deadline = std::chrono::steady_clock::now() + options.timeout;
  std::string const rank_text = std::to_string(rank);
  std::string const from =
      "convoy: rank " + rank_text + " asked rank 0 at " + address + " for " + std::string(what);
  wait_until_resolves("rank 0", address, deadline);
  int attempts = 0;
  std::string missing;  // what rank 0 last said it waits for
  std::optional<zmq::socket_t> socket;
  while (std::chrono::steady_clock::now() < deadline) {
    ++attempts;
    if (!socket) {
      socket.emplace(context, zmq::socket_type::req);
      socket->set(zmq::sockopt::linger, 0);
      connect_under(*socket, key);
      socket->connect(detail::endpoint(address));
    }
    socket->send(zmq::buffer(protocol), zmq::send_flags::sndmore);
    socket->send(zmq::buffer(rank_text), zmq::send_flags::sndmore);
    socket->send(zmq::buffer(options.run), zmq::send_flags::sndmore);
    socket->send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::none);
    auto const now = std::chrono::steady_clock::now();
    auto const wait = std::min(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), options.retry);
    zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLIN, 0};
    comm::detail::poll(&item, 1, std::max(wait, std::chrono::milliseconds(1)));
    if ((item.revents & ZMQ_POLLIN) == 0) {  // not there yet: a fresh socket asks again
      socket.reset();
      continue;
    }
    std::vector<zmq::message_t> answer;
    (void)zmq::recv_multipart(*socket, std::back_inserter(answer));
    if (answer.size() == 2 && detail::frame_text(answer[0]) == "wait") {
      missing = detail::frame_text(answer[1]);
      auto const pause = std::min(options.retry, std::chrono::milliseconds(100));
      std::this_thread::sleep_for(std::min(
          pause, std::chrono::duration_cast<std::chrono::milliseconds>(
                     deadline - std::chrono::steady_clock::now() + std::chrono::milliseconds(1))));
      continue;
    }
    if (answer.size() == 3 && detail::frame_text(answer[0]) == "went-on" &&
        earlier_generation(options.run, answer[1].to_string_view()))
      throw LeftBehind(from + ": " + detail::frame_text(answer[2]));
    if (answer.size() == 2 && detail::frame_text(answer[0]) == "error")
      throw ProtocolError(from + " and was refused: " + detail::frame_text(answer[1]));
    if (answer.size() < 2 || detail::frame_text(answer[0]) != protocol)
      throw ProtocolError(from + "; the answer does not speak " + std::string(protocol));
    if (answer[1].to_string_view() != options.run) {
      throw ProtocolError(from + " and was answered by a process of another run: " +
                          detail::other_run(answer[1].to_string_view(), options.run,
                                            "rank " + rank_text, "rank 0"));
    }
    answer.erase(answer.begin(), answer.begin() + 2);
    return answer;
  }
  if (!missing.empty()) {
    throw StillWaiting("convoy: rank " + rank_text + " could not fetch " + std::string(what) +
                       " from rank 0 at " + address + ": after " +
                       std::to_string(options.timeout.count()) +
                       " ms rank 0 was still waiting for rank(s) " + missing +
                       "; are they started, and can they reach that address?" + run_key_hint(key));
  }
  throw TimeoutError("convoy: rank " + rank_text + " could not fetch " + std::string(what) +
                     " from rank 0 at " + address + ": no answer within " +
                     std::to_string(options.timeout.count()) + " ms (" + std::to_string(attempts) +
                     " attempts); is rank 0 running, and is its address reachable from here?" +
                     run_key_hint(key));
}

/// The addresses of `cluster`'s training ranks (worker_rank() 0..worker_count()-1), by rank.
inline std::vector<std::string> worker_addresses(Cluster const& cluster) {
  std::vector<std::string> out;
  for (std::size_t w = 0; w < cluster.worker_count(); ++w) out.push_back(cluster.worker_address(w));
  return out;
}

/// The processes at `addresses` (by rank; this one is `rank`) exchange one blob each: every rank
/// gets every rank's blob, in rank order. Rank 0 serves at its own address until every other rank
/// has them all; options.run must be the run's identity. `previous`: rank 0's last gather of the
/// same exchange, when this one follows it (serve()). Blocks; throws as serve() and ask().
inline std::vector<std::vector<std::byte>> gather(std::vector<std::string> const& addresses,
                                                  int rank, std::span<std::byte const> mine,
                                                  Options const& options, std::string_view protocol,
                                                  std::string_view what,
                                                  Round const* previous = nullptr) {
  auto const world = static_cast<int>(addresses.size());
  if (world <= 1) return {std::vector<std::byte>(mine.begin(), mine.end())};
  std::string const& coordinator = addresses.front();
  if (rank > 0) {
    auto frames = ask(coordinator, rank, mine, options, protocol, what);
    if (frames.size() != static_cast<std::size_t>(world)) {
      throw ProtocolError("convoy: rank " + std::to_string(rank) + " got " +
                          std::to_string(frames.size()) + " blobs of " + std::string(what) +
                          " from rank 0 at " + coordinator + ", not " + std::to_string(world));
    }
    std::vector<std::vector<std::byte>> blobs;
    for (auto const& f : frames) {
      auto const* bytes = f.data<std::byte>();
      blobs.emplace_back(bytes, bytes + f.size());
    }
    return blobs;
  }
  std::vector<std::optional<std::vector<std::byte>>> held(static_cast<std::size_t>(world));
  held[0].emplace(mine.begin(), mine.end());
  std::vector<std::vector<std::byte>> all;
  serve(
      coordinator, world, options, protocol, what,
      [&](int r, std::span<std::byte const> payload)
          -> std::optional<std::vector<std::vector<std::byte>>> {
        held[static_cast<std::size_t>(r)].emplace(payload.begin(), payload.end());
        if (std::ranges::any_of(held, [](auto const& h) { return !h.has_value(); }))
          return std::nullopt;
        if (all.empty())
          for (auto const& h : held) all.push_back(*h);
        return all;
      },
      previous);
  return all;
}

/// The training ranks of `cluster` (worker_rank() 0..worker_count()-1) exchange one blob each, as
/// above, with the run's identity from the cluster when options.run is empty. A single process
/// gets its own. Throws ClusterError for a ps or evaluator task, which takes no part in a
/// collective.
inline std::vector<std::vector<std::byte>> gather(Cluster const& cluster,
                                                  std::span<std::byte const> mine,
                                                  Options const& options, std::string_view protocol,
                                                  std::string_view what) {
  if (cluster.single_process()) return {std::vector<std::byte>(mine.begin(), mine.end())};
  int const rank = cluster.worker_rank();
  if (rank < 0) {
    throw ClusterError("convoy: task " + cluster.job + "[" + std::to_string(cluster.index) +
                       "] takes no part in a collective; only the chief and the workers do");
  }
  Options run_options = options;
  if (run_options.run.empty()) run_options.run = run_identity(cluster);
  return gather(worker_addresses(cluster), rank, mine, run_options, protocol, what);
}

}  // namespace convoy::comm::bootstrap
