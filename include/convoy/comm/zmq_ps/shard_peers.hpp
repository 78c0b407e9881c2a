// The connections a parameter-server shard serves: which worker each one carries, which may speak
// for a worker, which closed ones were a lost worker's, and the cap on how many are open. No
// socket and no rules: the shard's loop (shard.hpp) feeds it the connection monitor's events and
// the requests' headers, and applies the rules to the workers it says were lost.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "../detail/connection_cap.hpp"

namespace convoy::comm::zmq_ps {

class ShardPeers {
 public:
  /// A worker's connection: the ROUTER socket's identity for it is never given to another one.
  struct Peer {
    std::size_t worker = 0;
    std::string address;
    std::string identity;
  };

  explicit ShardPeers(std::size_t workers) : spoken_(workers, 0) {}

  /// At most `cap` connections open from now on (ConnectionCap).
  void cap_at(std::size_t cap) { connections_ = comm::detail::ConnectionCap(cap); }
  std::size_t cap() const { return connections_.cap(); }

  /// A fingerprinted request of `worker` came on the connection `identity`, whose descriptor and
  /// peer address `header` carries.
  void remember(zmq::message_t const& identity, zmq::message_t& header, std::size_t worker) {
    int const fd = header.get(ZMQ_SRCFD);
    auto const known = peers_.find(fd);
    // Known: no address to read or copy again (unless the descriptor is another connection's now).
    if (known != peers_.end() && known->second.worker == worker &&
        known->second.identity == identity.to_string_view()) {
      return;
    }
    char const* address = header.gets("Peer-Address");
    peers_.insert_or_assign(fd, Peer{worker, address ? address : "?", identity.to_string()});
    spoken_[worker] = 1;
  }

  /// Whether a fingerprinted request of `worker` came on some connection (its hello, at least).
  bool spoken(std::size_t worker) const { return spoken_[worker] != 0; }

  /// Whether a message naming `worker`, which has spoken, may come on the connection `identity`:
  /// one its fingerprinted requests came on, or any when none of its connections is open (a
  /// request sent again on a new connection after the old one was lost comes before anything else
  /// on it).
  bool speaks_for(zmq::message_t const& identity, std::size_t worker) const {
    bool open = false;
    for (auto const& [fd, peer] : peers_) {
      if (peer.worker != worker) continue;
      if (peer.identity == identity.to_string_view()) return true;
      open = true;
    }
    return !open;
  }

  /// Whether `identity` is a lost worker's closed connection: what it sent before it closed may
  /// still wait to be read, and is dropped.
  bool lost_connection(std::string_view identity) const {
    return !closed_.empty() && closed_.contains(identity);
  }

  /// The address a connection's identity was last seen at, for answers sent later.
  std::string address_of(std::string_view identity) const {
    for (auto const& [fd, peer] : peers_) {
      if (peer.identity == identity) return "peer " + peer.address;
    }
    return "a peer";
  }

  /// Connection `fd` closed. Returns its worker when that worker is lost: it has not said
  /// goodbye (`finished` says who has) and no other connection of it is open (it came back before
  /// this one's end was seen).
  std::optional<Peer> closed(int fd, std::function<bool(std::size_t)> const& finished) {
    connections_.closed(fd);
    auto const it = peers_.find(fd);
    if (it == peers_.end()) return std::nullopt;
    Peer peer = std::move(it->second);
    peers_.erase(it);
    if (finished(peer.worker)) return std::nullopt;
    closed_.insert(peer.identity);
    for (auto const& [other, open] : peers_) {
      if (open.worker == peer.worker) return std::nullopt;
    }
    return peer;
  }

  /// Connection `fd` was accepted. At the cap, the oldest open connection that has sent no
  /// request of this run (an idle stranger) is closed to make room, so that a worker arriving late
  /// or connecting again always gets in; when every open connection is a worker's, the new one is.
  /// Says which was closed.
  std::optional<comm::detail::ConnectionCap::Closed> accepted(int fd) {
    return connections_.accepted(fd, [&](int open) { return peers_.contains(open); });
  }

 private:
  std::map<int, Peer> peers_;                  ///< connections by file descriptor
  std::vector<char> spoken_;                   ///< per worker: see spoken()
  std::set<std::string, std::less<>> closed_;  ///< identities of lost workers' closed connections
  comm::detail::ConnectionCap connections_{0};
};

/// The cap on a shard's open connections: `max_connections`, or the file limit less what the
/// shard keeps for itself. Says on `log` when that leaves too few for the cluster: each worker
/// holds one, and one more while it reconnects.
inline std::size_t shard_connection_cap(std::size_t max_connections, std::size_t workers,
                                        std::string const& shard, std::ostream* log) {
  constexpr std::size_t reserved = comm::detail::reserved_descriptors;
  std::size_t const room = comm::detail::file_room();
  std::size_t const cap = max_connections ? std::min(max_connections, room) : room;
  std::size_t const needed = 2 * workers;
  if (cap < needed && log) {
    *log << "convoy: " << shard << " may hold " << cap << " connection(s) (its file limit is "
         << room + reserved << ", " << reserved << " kept for itself"
         << (max_connections ? ", ZmqPs::max_connections " + std::to_string(max_connections)
                             : std::string())
         << "), fewer than the " << needed << " its " << workers
         << " worker(s) may need; raise the limit (ulimit -n " << needed + reserved << " or more)"
         << std::endl;
  }
  return cap;
}

}  // namespace convoy::comm::zmq_ps
