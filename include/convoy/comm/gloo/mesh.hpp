// connect_mesh: a Gloo context whose processes are connected pairwise over Gloo's TCP transport,
// each process having learnt the others' listening addresses through convoy's rendezvous
// (comm/bootstrap/rendezvous.hpp, served by worker 0 at its cluster address) instead of a Gloo
// store: one round trip to worker 0, which names the process that never came, and a second in
// which the ranks compare each connection's two ends, so that one a stranger took is found.
#pragma once

#include <arpa/inet.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "gloo_message.hpp"

namespace convoy::comm::gloo_fabric {

namespace detail {
inline constexpr std::string_view mesh_protocol = "convoy-gloo-mesh/2";
inline constexpr std::string_view ends_protocol = "convoy-gloo-mesh-ends/1";
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

// "host:port" of a socket address (IPv4 or IPv6).
inline std::string endpoint_text(::sockaddr_storage const& a) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto const& in = reinterpret_cast<::sockaddr_in const&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof host);
    port = ntohs(in.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto const& in6 = reinterpret_cast<::sockaddr_in6 const&>(a);
  ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof host);
  port = ntohs(in6.sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

inline bool same_endpoint(::sockaddr_storage const& a, ::sockaddr_storage const& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto const &x = reinterpret_cast<::sockaddr_in const&>(a),
               &y = reinterpret_cast<::sockaddr_in const&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  auto const &x = reinterpret_cast<::sockaddr_in6 const&>(a),
             &y = reinterpret_cast<::sockaddr_in6 const&>(b);
  return x.sin6_port == y.sin6_port &&
         std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
}

// Who is at the other end of this process's connection whose own end is `local`: Gloo's pair took
// it on its listening port and keeps the peer's address to itself (its header, pair.h, is not
// installed), so the process's own sockets are asked. Empty when there is none; every one of them,
// joined, in the unlikely case of two.
inline std::string accepted_peer(::sockaddr_storage const& local) {
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

// Connects this rank's pair with every other rank to the address that rank gave for it (`all`:
// every rank's packed addresses), and returns the two ends of each connection as this side sees
// them, in peer order (this rank skipped): this end, then the other. The side that connected
// knows both; the side whose pair listened finds its peer among its sockets. A pair that could
// not connect gives the reason and an empty other end: the other rank may have been refused
// because a stranger came first, which the ends round tells, so it is not yet an error.
inline std::vector<std::vector<char>> connect_pairs(
    ::gloo::transport::Context& transport, int rank, int size,
    std::vector<std::vector<std::byte>> const& all) {
  using ::gloo::transport::tcp::Address;
  std::vector<std::vector<char>> ends;
  auto const bytes = [](std::string const& s) { return std::vector<char>(s.begin(), s.end()); };
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto const theirs = unpack(all.at(static_cast<std::size_t>(peer)), size - 1, peer);
    // Peer p lists its pairs in rank order without itself: ours is at rank, or rank - 1 past p.
    auto const& address = theirs.at(static_cast<std::size_t>(rank > peer ? rank - 1 : rank));
    auto& pair = transport.getPair(peer);
    auto const listening = dynamic_cast<Address const&>(pair->address()).getSockaddr();
    std::string mine, other;
    try {
      pair->connect(address);
      // Once connected, the pair's address is its socket's own end: the listening address on the
      // side that took the connection, a new port on the side that made it.
      auto const own = dynamic_cast<Address const&>(pair->address()).getSockaddr();
      mine = endpoint_text(own);
      other = same_endpoint(own, listening) ? accepted_peer(own)
                                            : endpoint_text(Address(address).getSockaddr());
    } catch (std::exception const& e) {
      mine = "could not connect (" + readable_gloo_message(e.what()) + ")";
      other.clear();
    }
    ends.push_back(bytes(mine));
    ends.push_back(bytes(other));
  }
  return ends;
}

// The connections of `rank` whose ends the two ranks see differently (`seen`: every rank's
// connect_pairs(), packed), for the log; empty when every one of them agrees. Each rank judges
// every pair from the same blobs, so all of them decide alike.
inline std::string taken_pairs(std::vector<std::vector<std::byte>> const& seen, int rank,
                               int size) {
  std::vector<std::vector<std::vector<char>>> ends;
  for (int r = 0; r < size; ++r)
    ends.push_back(unpack(seen.at(static_cast<std::size_t>(r)), 2 * (size - 1), r));
  auto const at = [](int of, int peer) {  // index of `peer` in rank `of`'s list
    return static_cast<std::size_t>(2 * (peer > of ? peer - 1 : peer));
  };
  auto const str = [](std::vector<char> const& v) { return std::string(v.begin(), v.end()); };
  std::string out;
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
      if (a != rank && b != rank) continue;  // named by the two ranks it joins
      int const me = a == rank ? a : b, them = a == rank ? b : a;
      auto const& mine = ends[static_cast<std::size_t>(me)];
      auto const& theirs = ends[static_cast<std::size_t>(them)];
      auto const k = at(me, them), l = at(them, me);
      auto const view = [&](std::vector<std::vector<char>> const& e, std::size_t x) {
        return e[x + 1].empty() ? str(e[x]) : "joins " + str(e[x]) + " to " + str(e[x + 1]);
      };
      if (!out.empty()) out += "; ";
      out += "the one with rank " + std::to_string(them) + ": this end " + view(mine, k) +
             ", rank " + std::to_string(them) + "'s " + view(theirs, l);
    }
  }
  if (any && out.empty()) out = "between other ranks";
  return out;
}
}  // namespace detail

/// Where Gloo's TCP connections of this process listen: a host name or address, or a network
/// interface name.
struct Listen {
  std::string host;
  std::string interface;
};

/// Connects the processes at `addresses` (by rank, their addresses in the cluster: rank 0's serves
/// the rendezvous) pairwise; this one is `rank`. Blocks until every pair is connected and both
/// ends of each agree (below). Operations on the context give up after `timeout`; the ranks wait
/// `options.timeout` for each other to meet (options.run: the run's identity). Throws TimeoutError
/// naming the ranks that never came, Error when Gloo cannot listen where asked or when a process
/// not of the run took a connection at every attempt.
///
/// Gloo's TCP pair listens on a port of its own and takes the first connection that comes, with
/// no word exchanged: a stranger that connects first becomes the pair's peer, and the real peer
/// is refused. So after connecting, the ranks gather each pair's two ends as each side sees them
/// (a second round at rank 0, under the run's identity and key): a pair whose ends disagree was
/// taken, and every rank drops its connections and connects again on fresh ports, up to
/// detail::mesh_attempts times, logging each taken connection.
inline std::shared_ptr<::gloo::Context> connect_mesh(std::vector<std::string> const& addresses,
                                                     int rank, Listen const& listen,
                                                     std::chrono::milliseconds timeout,
                                                     bootstrap::Options const& options) {
  int const size = static_cast<int>(addresses.size());
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    ::gloo::transport::tcp::attr attr;
    if (!listen.interface.empty()) {
      attr.iface = listen.interface;
    } else {
      attr.hostname = listen.host;
    }
    device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (std::exception const& e) {
    throw Error("convoy: Gloo cannot listen on " +
                (listen.interface.empty() ? "host '" + listen.host + "'"
                                          : "interface '" + listen.interface + "'") +
                ": " + readable_gloo_message(e.what()));
  }
  std::string taken;  // the last attempt's taken connections, for the error
  for (int attempt = 1; attempt <= detail::mesh_attempts; ++attempt) {
    auto transport = device->createContext(rank, size);
    transport->setTimeout(timeout);
    auto const round = " #" + std::to_string(attempt);
    std::vector<std::vector<char>> mine;
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      mine.push_back(transport->createPair(peer)->address().bytes());
    }
    auto const all =
        bootstrap::gather(addresses, rank, detail::pack(mine), options,
                          std::string(detail::mesh_protocol) + round, "the Gloo addresses");
    auto const ends = detail::connect_pairs(*transport, rank, size, all);
    auto const seen =
        bootstrap::gather(addresses, rank, detail::pack(ends), options,
                          std::string(detail::ends_protocol) + round, "the Gloo connections' ends");
    taken = detail::taken_pairs(seen, rank, size);
    if (taken.empty()) {
      auto context = std::make_shared<detail::MeshContext>(rank, size, timeout);
      context->adopt(std::move(device), std::move(transport));
      return context;
    }
    // One piece, so that the lines of ranks in threads of one process do not interleave.
    std::string const line =
        "convoy: rank " + std::to_string(rank) +
        " found Gloo connections taken by a process not of this run: " + taken +
        "; every rank drops its connections" +
        (attempt < detail::mesh_attempts
             ? " and connects again on fresh ports (attempt " + std::to_string(attempt + 1) +
                   " of " + std::to_string(detail::mesh_attempts) + ")"
             : std::string()) +
        "\n";
    std::clog << line << std::flush;
  }  // the transport context goes: its pairs close, a stranger's connection with them
  throw Error("convoy: rank " + std::to_string(rank) + " could not connect its Gloo pairs: at " +
              std::to_string(detail::mesh_attempts) +
              " attempts a process not of this run took a connection first (the last: " + taken +
              "); something on these hosts connects to every new port");
}

/// Connects the `cluster`'s training ranks (worker_rank() 0..worker_count()-1), as above, with the
/// run's identity from the cluster when options.run is empty.
inline std::shared_ptr<::gloo::Context> connect_mesh(Cluster const& cluster, Listen const& listen,
                                                     std::chrono::milliseconds timeout,
                                                     bootstrap::Options options) {
  if (cluster.single_process()) return connect_mesh({""}, 0, listen, timeout, options);
  if (options.run.empty()) options.run = bootstrap::run_identity(cluster);
  return connect_mesh(bootstrap::worker_addresses(cluster), cluster.worker_rank(), listen, timeout,
                      options);
}

}  // namespace convoy::comm::gloo_fabric
