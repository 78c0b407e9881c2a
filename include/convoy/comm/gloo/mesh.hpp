// connect_mesh: a Gloo context whose processes are connected pairwise over Gloo's TCP transport,
// each process having learnt the others' listening addresses through convoy's rendezvous
// (comm/bootstrap/rendezvous.hpp, served by worker 0 at its cluster address) instead of a Gloo
// store: one round trip to worker 0, which names the process that never came, and a second in
// which the ranks compare each connection's two ends, so that one a stranger took is found.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "../detail/sockets.hpp"
#include "gloo_message.hpp"

namespace convoy::comm::gloo_fabric {

namespace detail {
using comm::detail::endpoint_text;
using comm::detail::same_endpoint;

inline constexpr std::string_view mesh_protocol = "convoy-gloo-mesh/2";
// How many times the ranks connect on fresh ports when a process not of the run took a connection.
inline constexpr int mesh_attempts = 3;

// A gloo::Context whose connections this header makes (its members are Gloo's protected ones).
class MeshContext : public ::gloo::Context {
 public:
  MeshContext(int rank, int size, std::chrono::milliseconds timeout) : ::gloo::Context(rank, size) {
    setTimeout(timeout);
  }
  void adopt(std::shared_ptr<::gloo::transport::Device> device,
             std::shared_ptr<::gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Each peer's address, in peer order (this rank skipped), as one blob: a 4-byte length before each.
inline std::vector<std::byte> pack(std::vector<std::vector<char>> const& addresses) {
  std::vector<std::byte> out;
  for (auto const& a : addresses) {
    auto const n = static_cast<std::uint32_t>(a.size());
    auto const* len = reinterpret_cast<std::byte const*>(&n);
    out.insert(out.end(), len, len + sizeof n);
    auto const* bytes = reinterpret_cast<std::byte const*>(a.data());
    out.insert(out.end(), bytes, bytes + a.size());
  }
  return out;
}
inline std::vector<std::vector<char>> unpack(std::vector<std::byte> const& blob, int peers,
                                             int from) {
  std::vector<std::vector<char>> out;
  std::size_t at = 0;
  for (int p = 0; p < peers; ++p) {
    std::uint32_t n = 0;
    if (at + sizeof n > blob.size()) break;
    std::memcpy(&n, blob.data() + at, sizeof n);
    at += sizeof n;
    if (at + n > blob.size()) break;
    auto const* bytes = reinterpret_cast<char const*>(blob.data() + at);
    out.emplace_back(bytes, bytes + n);
    at += n;
  }
  if (static_cast<int>(out.size()) != peers || at != blob.size()) {
    throw ProtocolError("convoy: the Gloo addresses of rank " + std::to_string(from) +
                        " do not parse (" + std::to_string(blob.size()) + " bytes)");
  }
  return out;
}

// The far end of this process's connected socket whose own end is `local`, found among the
// process's sockets: Gloo's pair keeps its peer's address to itself (its header, pair.h, does not
// compile from Debian's package). Empty when there is none; every one of them, joined, in the
// unlikely case of two.
inline std::string peer_of(::sockaddr_storage const& local) {
  std::string peers;
  std::error_code ec;
  for (auto const& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (std::exception const&) {
      continue;
    }
    ::sockaddr_storage own{}, peer{};
    ::socklen_t own_size = sizeof own, peer_size = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<::sockaddr*>(&own), &own_size) != 0) continue;
    if (!same_endpoint(own, local)) continue;
    if (::getpeername(fd, reinterpret_cast<::sockaddr*>(&peer), &peer_size) != 0) continue;
    peers += (peers.empty() ? "" : " and ") + endpoint_text(peer);
  }
  return peers;
}

// A plain connection to a pair's listening `address`, held until the ends round is over: when this
// rank's pair failed before connecting (a stranger's connection to its own port, closed at once,
// fails it), the peer's pair may be waiting for it and would wait out Gloo's whole timeout. Taking
// this one, it stops waiting, and the ends round finds the pair bad.
class Poke {
 public:
  explicit Poke(::gloo::transport::tcp::Address const& address)
      : fd_(comm::detail::dial(address.getSockaddr(), std::chrono::seconds(1)).fd) {}
  Poke(Poke&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Poke& operator=(Poke&&) = delete;
  Poke(Poke const&) = delete;
  Poke& operator=(Poke const&) = delete;
  ~Poke() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_ = -1;
};

// Connects this rank's pair with every other rank to the address that rank gave for it (`all`:
// every rank's packed addresses), and returns the two ends of each connection as this side sees
// them, in peer order (this rank skipped): this end, then the other, both read from the socket
// (the pair that listened took the connection on its own port). A pair that could not connect
// gives the reason and an empty other end, and pokes the peer's port (`pokes` holds them): the
// other rank may have been refused because a stranger came first, which the ends round tells.
inline std::vector<std::vector<char>> connect_pairs(::gloo::transport::Context& transport, int rank,
                                                    int size,
                                                    std::vector<std::vector<std::byte>> const& all,
                                                    std::vector<Poke>& pokes) {
  using ::gloo::transport::tcp::Address;
  std::vector<std::vector<char>> ends;
  auto const bytes = [](std::string const& s) { return std::vector<char>(s.begin(), s.end()); };
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto const theirs = unpack(all.at(static_cast<std::size_t>(peer)), size - 1, peer);
    // Peer p lists its pairs in rank order without itself: ours is at rank, or rank - 1 past p.
    auto const& address = theirs.at(static_cast<std::size_t>(rank > peer ? rank - 1 : rank));
    auto& pair = transport.getPair(peer);
    std::string mine, other;
    try {
      pair->connect(address);
      // Once connected, the pair's address is its socket's own end.
      auto const own = dynamic_cast<Address const&>(pair->address()).getSockaddr();
      mine = endpoint_text(own);
      other = peer_of(own);
    } catch (std::exception const& e) {
      mine = "could not connect (" + readable_gloo_message(e.what()) + ")";
      other.clear();
      pokes.emplace_back(Address(address));
    }
    ends.push_back(bytes(mine));
    ends.push_back(bytes(other));
  }
  return ends;
}

// What the ends round found: the connections of `rank` whose two sides disagree, for the log (or
// "between other ranks"), and whether every such pair shows a stranger's hand: one side holds a
// connection the other did not make, or was refused or cut off while the other rank is alive
// (it answered the round). A pair that failed on both sides otherwise (a timeout, an unreachable
// address) is the network's fault, and trying again would only repeat it.
struct Verdict {
  std::string taken;
  bool stranger = true;
  std::string failure;  // when not: the pair's two reasons
};

inline bool refused_or_cut(std::string_view why) {
  return why.find("Connection refused") != why.npos || why.find("Connection reset") != why.npos ||
         why.find("closed by peer") != why.npos || why.find("unexpectedly closed") != why.npos;
}

// Judges every pair from every rank's connect_pairs() (`seen`, packed): each rank reads the same
// blobs, so all of them decide alike.
inline Verdict judge(std::vector<std::vector<std::byte>> const& seen, int rank, int size) {
  std::vector<std::vector<std::vector<char>>> ends;
  for (int r = 0; r < size; ++r)
    ends.push_back(unpack(seen.at(static_cast<std::size_t>(r)), 2 * (size - 1), r));
  auto const at = [](int of, int peer) {  // index of `peer` in rank `of`'s list
    return static_cast<std::size_t>(2 * (peer > of ? peer - 1 : peer));
  };
  auto const str = [](std::vector<char> const& v) { return std::string(v.begin(), v.end()); };
  Verdict verdict;
  bool any = false;
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      auto const& ab = ends[static_cast<std::size_t>(a)];
      auto const& ba = ends[static_cast<std::size_t>(b)];
      auto const i = at(a, b), j = at(b, a);
      bool const agree =
          !ab[i + 1].empty() && !ba[j + 1].empty() && ab[i] == ba[j + 1] && ab[i + 1] == ba[j];
      if (agree) continue;
      any = true;
      auto const view = [&](std::vector<std::vector<char>> const& e, std::size_t x) {
        return e[x + 1].empty() ? str(e[x]) : "joins " + str(e[x]) + " to " + str(e[x + 1]);
      };
      bool const held = !ab[i + 1].empty() || !ba[j + 1].empty();
      if (!held && !refused_or_cut(str(ab[i])) && !refused_or_cut(str(ba[j]))) {
        verdict.stranger = false;
        if (verdict.failure.empty()) {
          verdict.failure = "rank " + std::to_string(a) + " and rank " + std::to_string(b) +
                            " could not connect: rank " + std::to_string(a) + "'s end " +
                            view(ab, i) + ", rank " + std::to_string(b) + "'s " + view(ba, j);
        }
      }
      if (a != rank && b != rank) continue;  // named by the two ranks it joins
      int const me = a == rank ? a : b, them = a == rank ? b : a;
      auto const& mine = ends[static_cast<std::size_t>(me)];
      auto const& theirs = ends[static_cast<std::size_t>(them)];
      if (!verdict.taken.empty()) verdict.taken += "; ";
      verdict.taken += "the one with rank " + std::to_string(them) + ": this end " +
                       view(mine, at(me, them)) + ", rank " + std::to_string(them) + "'s " +
                       view(theirs, at(them, me));
    }
  }
  if (any && verdict.taken.empty()) verdict.taken = "between other ranks";
  return verdict;
}
}  // namespace detail

/// Where Gloo's TCP connections of this process listen: a host name or address, or a network
/// interface name.
struct Listen {
  std::string host;
  std::string interface;
};

namespace detail {
// Gloo's TCP device, listening where `listen` says; Error naming it when it cannot.
inline std::shared_ptr<::gloo::transport::Device> create_device(Listen const& listen) {
  try {
    ::gloo::transport::tcp::attr attr;
    if (!listen.interface.empty()) {
      attr.iface = listen.interface;
    } else {
      attr.hostname = listen.host;
    }
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (std::exception const& e) {
    throw Error("convoy: Gloo cannot listen on " +
                (listen.interface.empty() ? "host '" + listen.host + "'"
                                          : "interface '" + listen.interface + "'") +
                ": " + readable_gloo_message(e.what()));
  }
}

// One line, in one piece so that the lines of ranks in threads of one process do not interleave.
inline void log_taken(int rank, std::string const& taken, int attempt) {
  std::string const line =
      "convoy: rank " + std::to_string(rank) +
      " found Gloo connections taken by a process not of this run: " + taken +
      "; every rank drops its connections" +
      (attempt < mesh_attempts
           ? " and connects again on fresh ports (attempt " + std::to_string(attempt + 1) + " of " +
                 std::to_string(mesh_attempts) + ")"
           : std::string()) +
      "\n";
  std::clog << line << std::flush;
}
}  // namespace detail

/// Connects the processes at `addresses` (by rank, their addresses in the cluster: rank 0's serves
/// the rendezvous) pairwise; this one is `rank`. Blocks until every pair is connected and, with
/// `check_ends`, both ends of each agree (below). Operations on the context give up after
/// `timeout`; the ranks wait `options.timeout` for each other to meet (options.run: the run's
/// identity). Throws TimeoutError naming the ranks that never came, Error when Gloo cannot listen
/// where asked, when a pair cannot connect, or when a process not of the run took a connection at
/// every attempt.
///
/// Gloo's TCP pair listens on a port of its own and takes the first connection that comes, with
/// no word exchanged: a stranger that connects first becomes the pair's peer, and the real peer
/// is refused. So after connecting, the ranks gather each pair's two ends as each side sees them
/// (a second round at rank 0, under the run's identity and key): a pair whose ends disagree, with
/// a stranger's hand in it, was taken, and every rank drops its connections and connects again on
/// fresh ports, up to detail::mesh_attempts times, logging each taken connection. Where address
/// translation sits between the workers the two sides never see the same ends: `check_ends` false
/// leaves the round out.
inline std::shared_ptr<::gloo::Context> connect_mesh(std::vector<std::string> const& addresses,
                                                     int rank, Listen const& listen,
                                                     std::chrono::milliseconds timeout,
                                                     bootstrap::Options const& options,
                                                     bool check_ends = true) {
  int const size = static_cast<int>(addresses.size());
  auto device = detail::create_device(listen);
  std::string taken;          // the last attempt's taken connections, for the error
  bootstrap::Round previous;  // rank 0's last round, for a rank whose answer was lost
  bootstrap::Round const* last = nullptr;
  for (int attempt = 1; attempt <= detail::mesh_attempts; ++attempt) {
    auto transport = device->createContext(rank, size);
    transport->setTimeout(timeout);
    auto const round = " #" + std::to_string(attempt);
    std::vector<std::vector<char>> mine;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      mine.push_back(transport->createPair(peer)->address().bytes());
    }
    auto const addresses_round = std::string(detail::mesh_protocol) + " addresses" + round;
    auto const all = bootstrap::gather(addresses, rank, detail::pack(mine), options,
                                       addresses_round, "the Gloo addresses", last);
    std::vector<detail::Poke> pokes;  // held until the ends round is over
    auto const ends = detail::connect_pairs(*transport, rank, size, all, pokes);
    detail::Verdict verdict;
    if (check_ends) {
      previous = {addresses_round, all};
      auto const ends_round = std::string(detail::mesh_protocol) + " ends" + round;
      auto const seen = bootstrap::gather(addresses, rank, detail::pack(ends), options, ends_round,
                                          "the Gloo connections' ends", &previous);
      previous = {ends_round, seen};
      last = &previous;
      verdict = detail::judge(seen, rank, size);
    } else {
      for (std::size_t e = 0; e < ends.size(); e += 2) {  // only this rank's own failures
        if (ends[e + 1].empty()) verdict.failure = std::string(ends[e].begin(), ends[e].end());
      }
      if (!verdict.failure.empty())
        verdict = {.taken = "",
                   .stranger = false,
                   .failure = "rank " + std::to_string(rank) + " " + verdict.failure};
    }
    if (verdict.taken.empty() && verdict.failure.empty()) {
      auto context = std::make_shared<detail::MeshContext>(rank, size, timeout);
      context->adopt(std::move(device), std::move(transport));
      return context;
    }
    if (!verdict.stranger) {
      throw Error("convoy: the Gloo connections of rank " + std::to_string(rank) + "'s group (" +
                  addresses.at(static_cast<std::size_t>(rank)) +
                  " in the cluster) failed: " + verdict.failure);
    }
    taken = verdict.taken;
    detail::log_taken(rank, taken, attempt);
  }  // the transport context goes: its pairs close, a stranger's connection with them
  throw Error("convoy: rank " + std::to_string(rank) + " could not connect its Gloo pairs: at " +
              std::to_string(detail::mesh_attempts) +
              " attempts a process not of this run took a connection first (the last: " + taken +
              "); something on these hosts connects to every new port, or address translation "
              "sits between the workers (then set comm::Gloo::check_connection_ends = false)");
}

/// Connects the `cluster`'s training ranks (worker_rank() 0..worker_count()-1), as above, with the
/// run's identity from the cluster when options.run is empty.
inline std::shared_ptr<::gloo::Context> connect_mesh(Cluster const& cluster, Listen const& listen,
                                                     std::chrono::milliseconds timeout,
                                                     bootstrap::Options options,
                                                     bool check_ends = true) {
  if (cluster.single_process()) return connect_mesh({""}, 0, listen, timeout, options, check_ends);
  if (options.run.empty()) options.run = bootstrap::run_identity(cluster);
  return connect_mesh(bootstrap::worker_addresses(cluster), cluster.worker_rank(), listen, timeout,
                      options, check_ends);
}

}  // namespace convoy::comm::gloo_fabric
