// connect_mesh: a Gloo context whose processes are connected pairwise over Gloo's TCP transport,
// each process having learnt the others' listening addresses through convoy's rendezvous
// (comm/bootstrap/rendezvous.hpp, served by worker 0 at its cluster address) instead of a Gloo
// store: one round trip to worker 0, which names the process that never came.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "gloo_message.hpp"

namespace convoy::comm::gloo_fabric {

namespace detail {
inline constexpr std::string_view mesh_protocol = "convoy-gloo-mesh/1";

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
}  // namespace detail

/// Where Gloo's TCP connections of this process listen: a host name or address, or a network
/// interface name.
struct Listen {
  std::string host;
  std::string interface;
};

/// Connects the processes at `addresses` (by rank, their addresses in the cluster: rank 0's serves
/// the rendezvous) pairwise; this one is `rank`. Blocks until every pair is connected. Operations
/// on the context give up after `timeout`; the ranks wait `options.timeout` for each other to meet
/// (options.run: the run's identity). Throws TimeoutError naming the ranks that never came, Error
/// when Gloo cannot listen where asked.
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
  auto context = std::make_shared<detail::MeshContext>(rank, size, timeout);
  auto transport = device->createContext(rank, size);
  transport->setTimeout(timeout);
  std::vector<std::vector<char>> mine;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    mine.push_back(transport->createPair(peer)->address().bytes());
  }
  auto const all = bootstrap::gather(addresses, rank, detail::pack(mine), options,
                                     detail::mesh_protocol, "the Gloo addresses");
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    auto const theirs = detail::unpack(all.at(static_cast<std::size_t>(peer)), size - 1, peer);
    // Peer p lists its pairs in rank order without itself: ours is at rank, or rank - 1 past p.
    auto const& address = theirs.at(static_cast<std::size_t>(rank > peer ? rank - 1 : rank));
    try {
      transport->getPair(peer)->connect(address);
    } catch (std::exception const& e) {
      throw Error("convoy: rank " + std::to_string(rank) + " could not connect to rank " +
                  std::to_string(peer) + " (" + addresses.at(static_cast<std::size_t>(peer)) +
                  " in the cluster) over Gloo: " + readable_gloo_message(e.what()));
    }
  }
  context->adopt(std::move(device), std::move(transport));
  return context;
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
