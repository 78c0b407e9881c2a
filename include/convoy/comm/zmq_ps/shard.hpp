// A parameter-server shard: it holds its pieces of the variables and their optimizer slots, runs
// the optimizer on them, and drives the Sync policy's rule object (sync/rules.hpp) exactly as the
// in-process central store does, one message at a time on one thread, so it needs no lock. A push
// is answered with the weights it produced (push and pull in one round trip); an answer the rules
// hold back (the open synchronous step is not complete, or the worker leads the slowest by more
// than S clocks) waits in a queue until they allow it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../core/detail/aligned_allocator.hpp"
#include "../../core/error.hpp"
#include "../../core/snapshot.hpp"
#include "../../exec/host.hpp"
#include "../../io/checkpoint_parts.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "../../sync/rules.hpp"
#include "../detail/connection_cap.hpp"
#include "../detail/zmq_poll.hpp"
#include "heartbeat.hpp"
#include "lost_worker.hpp"
#include "peer_log.hpp"
#include "security.hpp"
#include "shard_cpu.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

/// What a shard and its workers must agree on: the shard's pieces, the optimizer with its
/// settings, the Sync policy with its knobs, and the cluster's size. A worker whose fingerprint
/// differs runs another model or configuration.
template <class Sync>
std::uint64_t fingerprint(std::span<place::Piece const* const> pieces,
                          optim::Optimizer const& optimizer, Sync const& sync, std::size_t shards,
                          std::size_t workers) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  auto mix = [&](std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  };
  auto number = [&](std::uint64_t v) { mix(std::to_string(v) + ";"); };
  mix(optimizer.name());
  std::visit(
      [&](auto const& o) {  // the settings: a few floats, no padding
        mix({reinterpret_cast<char const*>(&o), sizeof o});
      },
      optimizer.get());
  mix(Sync::name);
  if constexpr (sync::takes_first_m<Sync>)
    number(static_cast<std::uint64_t>(sync.replicas_to_aggregate));
  if constexpr (requires { sync.goes_on_with(workers); }) {
    number(static_cast<std::uint64_t>(sync.min_workers));
    number(sync.stop_on_lost_worker ? 1 : 0);
  }
  if constexpr (sync::has_staleness_bound<Sync>)
    number(static_cast<std::uint64_t>(Sync::staleness));
  number(shards);
  number(workers);
  for (auto const* p : pieces) {
    mix(p->variable);
    number(p->begin);
    number(p->end);
  }
  return h;
}

/// Weights that ZeroMQ may still be sending: a reply lends the buffer, and the shard writes into a
/// buffer only while no send holds it (otherwise it copies into a free one first, see current()).
struct LentBuffer {
  convoy::detail::AlignedVector<float> data;
  std::atomic<int> lent{0};
};

template <class Sync>
class Shard {
 public:
  using Rules = decltype(std::declval<Sync const&>().make_rules(std::declval<Counters const&>()));

  struct Options {
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

  /// Descriptors a shard keeps for itself beyond its connections: ZeroMQ's own (its context, the
  /// socket, the monitor), a checkpoint part's file and directory, and the standard streams.
  static constexpr std::size_t reserved_descriptors = comm::detail::reserved_descriptors;

  Shard(std::vector<place::Piece const*> pieces, optim::Optimizer optimizer, Sync sync,
        Options options)
      : options_(std::move(options)),
        optimizer_(optimizer),
        sync_(sync),
        fingerprint_(fingerprint(pieces, optimizer, sync, options_.shards, options_.workers)),
        counters_{.local_steps = std::vector<std::int64_t>(options_.workers, 0)},
        rules_(sync.make_rules(counters_)) {
    for (auto const* p : pieces) pieces_.push_back(*p);
    for (auto const& p : pieces_) elements_ += p.end - p.begin;
    current_ = std::make_shared<LentBuffer>();
    current_->data.assign(elements_, 0.0f);
    slots_ = optimizer_.make_state(elements_);
    // The state ranges in this shard's own arena: each piece's overlap with them.
    for (auto const& p : pieces_) {
      for (auto const& r : options_.state_ranges) {
        std::size_t const from = std::max(r.begin, p.begin), to = std::min(r.end, p.end);
        if (from < to)
          slots_.assigned.push_back({p.offset + from - p.begin, p.offset + to - p.begin});
      }
    }
    std::ranges::sort(slots_.assigned, {}, &ArenaRange::begin);
    if (rules_.accumulates()) sum_.assign(elements_, 0.0f);
  }

  Shard(Shard const&) = delete;
  Shard& operator=(Shard const&) = delete;

  std::string name() const { return "ps:" + std::to_string(options_.index); }
  Counters const& counters() const { return counters_; }

  /// Binds and answers workers until every one has said goodbye or was lost for good (see
  /// on_loss). Throws Error when the address cannot be bound or a lost worker ends the run (the
  /// message names it), and TimeoutError when no worker has sent anything for the policy's timeout
  /// while some have not said goodbye (a worker died, or never came).
  void serve() {
    check_bind(name(), options_.endpoint, options_.security);  // before anything is bound
    // The optimizer runs on this thread alone: OpenMP's threads, idle between updates, spin for
    // their next region and take the cores from the workers and other shards on the machine
    // (bench_ps, 2 shards and 2 workers on 2 cores: 63% of the CPU, steps 10 times as long).
    auto const one_thread = exec::Host{}.enter();
    zmq::context_t context(1);
    // The ZAP handler is bound before the shard's socket, so no handshake comes before it.
    std::optional<ZapHandler> zap;
    if (options_.security.keys) {
      require_curve();
      zap.emplace(context, options_.security.authorized, name(), options_.log);
    }
    zmq::socket_t socket = open_socket(context);
    // Lost connections, to name the worker that went away (a dead process: the kernel closes
    // its sockets) or silent (heartbeats), and to apply on_loss to it.
    zmq::socket_t peers = watch_connections(context, socket);
    try {
      socket.bind(options_.endpoint);
    } catch (zmq::error_t const& e) {
      throw Error("convoy: " + name() + " cannot listen on " + options_.endpoint + ": " + e.what());
    }
    connections_ = comm::detail::ConnectionCap(connection_cap());
    if (options_.log) {
      *options_.log << "convoy: " << name() << " serving " << elements_ * sizeof(float)
                    << " bytes of weights in " << pieces_.size() << " piece(s) on "
                    << options_.endpoint << " for " << options_.workers << " worker(s) under "
                    << Sync::name << "; " << options_.security.mode() << options_.cpu.describe()
                    << std::endl;
    }
    socket_ = &socket;
    auto last_heard = std::chrono::steady_clock::now();
    while (!over()) {
      if (serve_turn(socket, peers, zap)) last_heard = std::chrono::steady_clock::now();
      if (!over() && std::chrono::steady_clock::now() - last_heard > sync_.timeout) {
        socket_ = nullptr;
        peer_log_.flush();  // the last summaries of refused messages, as on a clean end
        if (!failure_.empty()) throw Error(failure_);
        throw TimeoutError("convoy: " + name() + " heard from no worker for " +
                           std::to_string(sync_.timeout.count()) + " ms; " + missing_workers());
      }
    }
    ::zmq_socket_monitor(socket.handle(), nullptr, 0);
    socket_ = nullptr;
    peer_log_.flush();
    if (!failure_.empty()) throw Error(failure_);
    if (options_.log) *options_.log << summary() << std::endl;
  }

  std::int64_t malformed() const { return malformed_; }
  /// CURVE: handshakes refused because the worker's key is not authorized.
  std::int64_t refused() const { return refused_; }
  /// Connections of workers that had not said goodbye, lost (gone, or silent past heartbeats).
  std::int64_t lost() const { return lost_; }
  /// Connections closed at the cap (Options::max_connections): idle ones to make room, or new ones
  /// when every open connection was a worker's.
  std::int64_t over_cap() const { return over_cap_; }
  /// Answers dropped because their peer did not read them (its queue was full).
  std::int64_t unsent() const { return unsent_; }
  /// Pushes and pulls a worker sent again after losing its connection: answered, never applied
  /// twice.
  std::int64_t resent() const { return resent_; }

  /// Handles one message as serve() does, without a socket: `frames` as the ROUTER socket hands
  /// them over (the peer's identity, the header, the payload). Returns the answers sent meanwhile,
  /// each as the frames serve() would send (the addressee's identity first): the answer to this
  /// message, if it is answered now, and those of earlier requests it releases. Messages of more
  /// frames than serve() keeps are refused as serve() refuses them. Never blocks; not thread-safe,
  /// and never called while serve() runs. The fuzz targets (tests/fuzz) drive a shard through it.
  std::vector<std::vector<zmq::message_t>> handle_message(std::vector<zmq::message_t> frames) {
    std::vector<std::vector<zmq::message_t>> sent;
    outbox_ = &sent;
    bool const too_many = frames.size() > most_frames();
    if (too_many) frames.resize(most_frames());
    try {
      dispatch(frames, too_many);
    } catch (...) {
      outbox_ = nullptr;
      throw;
    }
    outbox_ = nullptr;
    return sent;
  }

 private:
  struct Waiting {
    zmq::message_t peer;
    std::uint32_t worker = 0;
    Op op = Op::push;
    std::int64_t tag = 0;  ///< push: the step its gradient went into
    std::uint64_t sequence = 0;
    float loss = 0.0f;             ///< apply-at-once: its own update's loss
    std::uint64_t generation = 0;  ///< the request's: a pull of a later one waits for its restore

    /// What a reply to it echoes of the request: its op, worker and sequence.
    Header request() const {
      Header h;
      h.op = op;
      h.worker = worker;
      h.sequence = sequence;
      return h;
    }
  };
  /// A worker's last push: its number and its answer, to answer a copy sent again without
  /// applying it twice.
  struct LastPush {
    std::uint64_t sequence = 0;
    Status status = Status::ok;
  };

  std::size_t live_workers() const { return options_.workers - goodbyes_.size() - departed(); }
  std::size_t departed() const {
    return static_cast<std::size_t>(std::count(departed_.begin(), departed_.end(), char{1}));
  }
  std::string departed_names() const {
    std::string out;
    for (std::size_t w = 0; w < departed_.size(); ++w) {
      if (departed_[w]) out += (out.empty() ? "" : ", ") + worker_name(w);
    }
    return out;
  }
  // Every worker said goodbye or was lost for good, and the run has an outcome: some worker
  // finished, or a loss ended it. With every worker lost and none finished, a restarted one may
  // still come; the policy's timeout ends that wait.
  bool over() const {
    if (goodbyes_.size() + departed() < options_.workers) return false;
    return !goodbyes_.empty() || !failure_.empty();
  }
  bool waits(std::uint32_t worker) const {
    return std::any_of(waiting_.begin(), waiting_.end(),
                       [&](Waiting const& w) { return w.worker == worker; });
  }
  // Accumulating rules whose open step needs more gradients than workers are left: the step can
  // never complete, so its gradients are dropped and the waiting pushes told that the run is over.
  bool step_unreachable() const {
    if constexpr (sync::elastic<Rules>) {
      // The gradients in the open step, and those the live workers have yet to give.
      std::size_t can_come = rules_.summed();
      for (std::size_t w = 0; w < options_.workers; ++w) {
        bool const finished = std::find(goodbyes_.begin(), goodbyes_.end(), w) != goodbyes_.end();
        can_come += !departed_[w] && !finished && !rules_.contributed(w);
      }
      return can_come < rules_.gradients_per_update();
    } else {
      return rules_.accumulates() && live_workers() < rules_.gradients_per_update();
    }
  }
  // Why a lost worker stops the run, for its message.
  std::string fail_reason(std::size_t live) const {
    if constexpr (requires { sync_.stop_on_lost_worker; }) {
      if (live < static_cast<std::size_t>(sync_.min_workers)) {
        return std::to_string(live) +
               " is below min_workers = " + std::to_string(sync_.min_workers);
      }
      if (sync_.stop_on_lost_worker) return "stop_on_lost_worker is set";
    }
    return "replicas_to_aggregate below the worker count makes backup workers";
  }

  std::string worker_name(std::size_t w) const { return "worker " + std::to_string(w); }

  // A worker's connection: the ROUTER socket's identity for it is never given to another one.
  struct Peer {
    std::size_t worker = 0;
    std::string address;
    std::string identity;
  };
  // Which worker each connection (file descriptor) carries, from its messages.
  void remember_peer(zmq::message_t const& identity, zmq::message_t& header, std::size_t worker) {
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
  // The cap on open connections (Options::max_connections), and the start's line when the file
  // limit leaves too few for the cluster: each worker holds one, and one more while it reconnects.
  std::size_t connection_cap() const {
    std::size_t const room = comm::detail::file_room();
    std::size_t const files = room + reserved_descriptors;
    std::size_t const cap =
        options_.max_connections ? std::min(options_.max_connections, room) : room;
    std::size_t const needed = 2 * options_.workers;
    if (cap < needed && options_.log) {
      *options_.log << "convoy: " << name() << " may hold " << cap << " connection(s) (its file "
                    << "limit is " << files << ", " << reserved_descriptors << " kept for itself"
                    << (options_.max_connections
                            ? ", ZmqPs::max_connections " + std::to_string(options_.max_connections)
                            : std::string())
                    << "), fewer than the " << needed << " its " << options_.workers
                    << " worker(s) may need; raise the limit (ulimit -n "
                    << needed + reserved_descriptors << " or more)" << std::endl;
    }
    return cap;
  }

  // Handles one event of the connection monitor, if one is there; returns whether one was.
  bool connection_event(zmq::socket_t& peers) {
    auto const event = comm::detail::next_connection_event(peers);
    if (!event) return false;
    if (event->fd < 0) return true;
    if (event->accepted) {
      accepted(event->fd);
    } else {
      closed(event->fd);
    }
    return true;
  }

  // A connection closed: a worker that has not said goodbye went away or, with heartbeats, fell
  // silent.
  void closed(int fd) {
    connections_.closed(fd);
    auto const it = peers_.find(fd);
    if (it == peers_.end()) return;
    auto const [worker, address, identity] = it->second;
    peers_.erase(it);
    if (std::find(goodbyes_.begin(), goodbyes_.end(), worker) != goodbyes_.end()) return;
    // What it sent before it closed may still wait to be read: that is dropped (see handle()).
    closed_.insert(identity);
    // Another connection of it is up: it came back before this one's end was seen.
    for (auto const& [other, peer] : peers_) {
      if (peer.worker == worker) return;
    }
    ++lost_;
    worker_lost(worker, address);
  }

  // A new connection at the cap makes room by closing the oldest open connection that has sent no
  // request of this run (an idle stranger), so that a worker arriving late or connecting again
  // always gets in; when every open connection is a worker's, the new one is closed. The monitor
  // reports each accept on this thread, in order with the closes, before any message of it.
  void accepted(int fd) {
    auto const shut = connections_.accepted(fd, [&](int open) { return peers_.contains(open); });
    if (!shut) return;
    ++over_cap_;
    peer_log_.note("peer " + shut->address, "connection(s) over the cap",
                   std::string(shut->newest ? "closed a new connection" : "closed an idle one") +
                       ": " + std::to_string(connections_.cap()) + " are open, its cap (" +
                       "ZmqPs::max_connections, or the file limit less " +
                       std::to_string(reserved_descriptors) + ")");
  }

  // Applies on_loss to a worker lost before its goodbye, and logs what follows.
  void worker_lost(std::size_t worker, std::string const& address) {
    std::string const what =
        name() + " lost " + worker_name(worker) + " at " + address + ": " +
        (options_.heartbeat.count() > 0
             ? "silent for over " + std::to_string(options_.heartbeat.count()) + " ms, or gone"
             : std::string("its connection closed"));
    if (departed_[worker] || !failure_.empty()) return;
    auto const live = live_workers() - 1;
    switch (on_loss(rules_, sync_, options_.workers, live, goodbyes_.size())) {
      case OnLoss::wait:
        if (options_.log) {
          *options_.log << "convoy: " << what << "; the others wait for it under " << Sync::name
                        << " (up to " << sync_.timeout.count()
                        << " ms); it is served again if it reconnects" << std::endl;
        }
        return;
      case OnLoss::depart: {
        departed_[worker] = 1;
        forget_waiting(worker);
        bool complete = false;
        if constexpr (sync::elastic<Rules>) {
          complete = rules_.leave(worker);
        } else {
          rules_.retire(worker);
        }
        if (options_.log) {
          *options_.log << "convoy: " << what << "; it counts as departed under " << Sync::name
                        << ", " << live << " worker(s) go on";
          if (rules_.accumulates()) {
            *options_.log << " and step " << rules_.open_step() + 1 << " takes "
                          << rules_.gradients_per_update() << " gradient(s)";
          }
          *options_.log << "; it is served again if it comes back" << std::endl;
        }
        if (complete) apply_open_step();
        release();
        return;
      }
      case OnLoss::fail:
        departed_[worker] = 1;
        forget_waiting(worker);
        failure_ = "convoy: " + what + "; step " + std::to_string(rules_.open_step() + 1) +
                   " needs " + std::to_string(rules_.gradients_per_update()) + " gradients and " +
                   std::to_string(live) + " worker(s) are left, so the " + std::string(Sync::name) +
                   " run stops (" + fail_reason(live) + ")";
        if (options_.log) *options_.log << failure_ << std::endl;
        for (auto& wait : waiting_) {  // every waiting worker hears it now, the others next time
          reply_error(wait.peer, wait.request(), failure_);
        }
        waiting_.clear();
        return;
    }
  }

  // A lost worker's waiting requests: nobody is left to answer (a gradient already summed into
  // the open step stays in it).
  void forget_waiting(std::size_t worker) {
    std::erase_if(waiting_, [&](Waiting const& w) { return w.worker == worker; });
  }

  std::string missing_workers() const {
    std::string out;
    for (std::size_t w = 0; w < options_.workers; ++w) {
      if (std::find(goodbyes_.begin(), goodbyes_.end(), w) == goodbyes_.end()) {
        out += (out.empty() ? "" : ", ") + std::to_string(w);
      }
    }
    return "worker(s) " + out + " have not said goodbye";
  }

  // The most frames a request carries: the peer, the header, weights and slots for each piece.
  std::size_t most_frames() const {
    return 2 + (1 + optimizer_.slot_names().size()) * pieces_.size();
  }

  // One received message, of which at most most_frames() were kept (`too_many`: there were more).
  // Only a message whose header is convoy's is answered: junk gets no answer (a peer sending it
  // as fast as it can would otherwise get as many answers back), only a count and a line per peer
  // and interval (PeerLog), which names the peer by its address.
  void dispatch(std::vector<zmq::message_t>& frames, bool too_many) {
    if (frames.size() < 2) return;  // not a worker's message: drop it
    sender_ = {frames[0].to_string(), peer_address(frames[1])};
    if (too_many) {
      std::string const why = "convoy: a message to " + name() + " has more than " +
                              std::to_string(most_frames() - 1) + " frames";
      try {
        Header const h = decode(frames[1], "a peer of " + name());
        refuse(frames[0], &h, why);
      } catch (ProtocolError const&) {  // not convoy's protocol: counted, no answer
        refuse(frames[0], nullptr, why);
      }
      return;
    }
    handle(frames);
  }

  // The shard's ROUTER socket, configured and not yet bound.
  zmq::socket_t open_socket(zmq::context_t& context) const {
    zmq::socket_t socket(context, zmq::socket_type::router);
    if (options_.security.keys) {
      socket.set(zmq::sockopt::curve_server, true);
      socket.set(zmq::sockopt::curve_secretkey, options_.security.keys->secret_key);
      // Every handshake is checked by the ZAP handler, whatever the domain.
      socket.set(zmq::sockopt::zap_domain, "convoy");
    }
    socket.set(zmq::sockopt::linger, 0);
    // An answer to a vanished worker fails at once, and so does one to a peer that does not read
    // its answers (its queue is full): it is dropped and counted, never waited for, so one such
    // peer cannot slow the shard down for the others (send()).
    socket.set(zmq::sockopt::router_mandatory, 1);
    socket.set(zmq::sockopt::sndtimeo, 0);
    // ZeroMQ drops a peer whose frame is larger than the largest this shard ever needs.
    std::size_t largest = max_header_bytes;
    for (auto const& p : pieces_) largest = std::max(largest, (p.end - p.begin) * sizeof(float));
    // Under CURVE the limit applies to the encrypted frame, which carries a command name, a nonce,
    // a MAC and a flags byte more: without this margin every frame of the largest piece dropped
    // its sender, silently, and training waited for its timeout.
    constexpr std::size_t curve_overhead = 64;
    socket.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(largest + curve_overhead));
    set_heartbeat(socket, options_.heartbeat);
    return socket;
  }

  // A socket that hears of `socket`'s accepted and closed connections.
  zmq::socket_t watch_connections(zmq::context_t& context, zmq::socket_t& socket) const {
    return comm::detail::watch_connections(context, socket, "inproc://convoy-shard-peers", name());
  }

  // One turn of serve(): the ZAP handler's request, every connection event, then one message.
  // True when a worker's request was heard: a peer sending junk, or a lost worker's stale
  // messages, must not keep a shard whose workers are all gone waiting.
  bool serve_turn(zmq::socket_t& socket, zmq::socket_t& peers, std::optional<ZapHandler>& zap) {
    zmq::pollitem_t items[3] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                {peers.handle(), 0, ZMQ_POLLIN, 0},
                                {zap ? zap->socket().handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    comm::detail::poll(items, zap ? 3 : 2, std::chrono::milliseconds(200));
    if (zap && (items[2].revents & ZMQ_POLLIN)) {
      zap->handle_one();  // a refused worker is logged there; the others are served on
      refused_ = zap->refused();
    }
    // Every event first, then one message: a descriptor is reused as soon as it closes, so an
    // old connection's end must be seen before a message of the new one on the same descriptor
    // (the monitor reports them in the order they happened).
    if (items[1].revents & ZMQ_POLLIN) {
      for (int n = 0; n < 10000 && connection_event(peers); ++n) {
      }
    }
    if (!(items[0].revents & ZMQ_POLLIN)) return false;
    bool const too_many = receive_frames(socket);
    dispatch(frames_, too_many);
    return std::exchange(heard_worker_, false);
  }

  // One message into frames_, frame by frame, keeping at most most_frames(). True when there
  // were more.
  bool receive_frames(zmq::socket_t& socket) {
    std::size_t const most = most_frames();
    frames_.clear();
    bool more = true, too_many = false;
    while (more) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::none)) break;
      more = frame.more();
      if (frames_.size() < most) {
        frames_.push_back(std::move(frame));
      } else {
        too_many = true;
      }
    }
    return too_many;
  }

  // The last line: how the run ended and what was refused, dropped and lost on the way.
  std::string summary() const {
    std::ostringstream line;
    line << "convoy: " << name() << " done: every worker said goodbye";
    if (departed() > 0) line << " but " << departed_names() << " (lost)";
    line << " at global step " << counters_.global_step << " (" << counters_.applied
         << " gradients applied, " << counters_.dropped << " dropped, " << malformed_
         << " malformed messages";
    if (unsent_ > 0) line << ", " << unsent_ << " answers dropped unread";
    if (over_cap_ > 0) line << ", " << over_cap_ << " connection(s) over the cap closed";
    if (options_.security.keys) line << ", " << refused_ << " worker key(s) refused";
    line << ")";
    if constexpr (sync::bounds_staleness<Rules>) {
      line << "; largest lead granted " << largest_lead_ << " clock(s)";
    }
    return line.str();
  }

  // The peer's IP address, as ZeroMQ read it from the connection (a message built by hand, as
  // handle_message() takes, has none).
  std::string peer_address(zmq::message_t const& frame) const {
    char const* address = socket_ ? ::zmq_msg_gets(frame.handle(), "Peer-Address") : nullptr;
    return address ? std::string("peer ") + address : std::string("a peer");
  }
  // The address a connection's identity was last seen at, for answers sent later.
  std::string address_of(zmq::message_t const& identity) const {
    if (identity.to_string_view() == sender_.identity) return sender_.address;
    for (auto const& [fd, peer] : peers_) {
      if (peer.identity == identity.to_string_view()) return "peer " + peer.address;
    }
    return "a peer";
  }
  // Whether a message naming `worker`, which has spoken before (spoken_), may come on the
  // connection `identity`: one its fingerprinted requests came on, or any when none of its
  // connections is open (a request sent again on a new connection after the old one was lost
  // comes before anything else on it).
  bool speaks_for(zmq::message_t const& identity, std::size_t worker) const {
    bool open = false;
    for (auto const& [fd, peer] : peers_) {
      if (peer.worker != worker) continue;
      if (peer.identity == identity.to_string_view()) return true;
      open = true;
    }
    return !open;
  }

  // A message refused: counted, noted once per peer and interval (PeerLog), and answered with an
  // error when its header is convoy's (`h`); junk gets no answer.
  void refuse(zmq::message_t& identity, Header const* h, std::string const& why) {
    ++malformed_;
    peer_log_.note(sender_.address, "refused message(s)", "dropped a message: " + why);
    if (h) reply_error(identity, *h, why);
  }

  // One request: [peer id, header, payload...].
  void handle(std::vector<zmq::message_t>& frames) {
    // Read after its connection closed and its worker was lost: nobody is left to answer, and
    // taking it would make a dead worker look back.
    if (!closed_.empty() && closed_.contains(frames[0].to_string())) return;
    Header h;
    try {
      h = decode(frames[1], "a peer of " + name());
    } catch (ProtocolError const& e) {  // not convoy's protocol: counted, no answer
      refuse(frames[0], nullptr, e.what());
      return;
    }
    try {
      check_request(frames, h);
    } catch (ProtocolError const& e) {
      refuse(frames[0], &h, e.what());
      return;
    }
    heard_worker_ = true;  // one of this run's workers, on a connection it may speak on
    if (void_request(frames[0], h)) return;
    if (departed_[h.worker]) come_back(h.worker);
    try {
      // Only a restore raises the generation, and only a pull may wait for it.
      if (h.generation > generation_ && h.op != Op::restore && h.op != Op::pull &&
          h.op != Op::hello && h.op != Op::bye) {
        throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                            describe(h.op) + " of generation " + std::to_string(h.generation) +
                            " to " + name() + ", which is at " + std::to_string(generation_));
      }
      if (!answer_resent(frames, h)) route(frames, h);
    } catch (ProtocolError const& e) {
      refuse(frames[0], &h, e.what());
    }
  }

  // Throws ProtocolError for a request this shard must not take: a worker it does not have, a
  // frame count other than announced, another layout, a goodbye not its worker's, a step after
  // a goodbye. Remembers the connection a worker's fingerprinted requests come on.
  void check_request(std::vector<zmq::message_t>& frames, Header const& h) {
    if (h.worker >= options_.workers) {
      throw ProtocolError("convoy: " + name() + " has " + std::to_string(options_.workers) +
                          " workers; a message names worker " + std::to_string(h.worker));
    }
    if (h.frames != frames.size() - 2) {
      throw ProtocolError("convoy: a " + describe(h.op) + " announces " + std::to_string(h.frames) +
                          " payload frames and carries " + std::to_string(frames.size() - 2));
    }
    // A goodbye too: one plaintext message naming a worker would otherwise end its run.
    if (h.op != Op::hello && h.fingerprint != fingerprint_) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                          describe(h.op) + " for another layout than " + name() + "'s");
    }
    if (h.op == Op::bye && socket_) check_goodbye(frames[0], h.worker);
    // A lost connection is named by the worker whose fingerprinted requests came on it (a
    // hello's is checked in hello()).
    if (socket_ && (h.op != Op::hello || h.fingerprint == fingerprint_)) {
      remember_peer(frames[0], frames[1], h.worker);
    }
    // A worker's goodbye is its last message: the rules have retired it (a bounded-staleness
    // clock table marks it with its largest clock), so a step of its would corrupt them.
    if ((h.op == Op::push || h.op == Op::pull) &&
        std::find(goodbyes_.begin(), goodbyes_.end(), h.worker) != goodbyes_.end()) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                          describe(h.op) + " to " + name() + " after its goodbye");
    }
  }

  // Before the worker's own hello no connection speaks for it: a goodbye then would end the part
  // of a worker still on its way.
  void check_goodbye(zmq::message_t const& identity, std::size_t worker) const {
    std::string const bye = "convoy: a goodbye naming worker " + std::to_string(worker);
    if (!spoken_[worker]) throw ProtocolError(bye + " came before that worker said hello; ignored");
    if (!speaks_for(identity, worker)) {
      throw ProtocolError(bye + " came on a connection that worker does not use; ignored");
    }
  }

  // Answers a request that can no longer be served with an error, and says so: one from before a
  // rollback (its worker has not heard of it yet: the answer carries the new generation, and its
  // worker starts over from the restored state), or any but a goodbye once a lost worker ended
  // the run.
  bool void_request(zmq::message_t& identity, Header const& h) {
    if (h.op != Op::hello && h.op != Op::bye && h.generation < generation_) {
      reply_error(identity, h,
                  "convoy: " + name() + " was rolled back to a checkpoint (generation " +
                      std::to_string(generation_) + "); this " + describe(h.op) +
                      " of generation " + std::to_string(h.generation) + " is void");
      return true;
    }
    if (!failure_.empty() && h.op != Op::bye) {
      reply_error(identity, h, failure_);
      return true;
    }
    return false;
  }

  void route(std::vector<zmq::message_t>& frames, Header const& h) {
    switch (h.op) {
      case Op::hello:
        return hello(frames, h);
      case Op::init:
        return init(frames, h);
      case Op::restore:
        return restore(frames, h);
      case Op::push:
        return push(frames, h);
      case Op::pull:
        return pull(frames, h);
      case Op::snapshot:
        return snapshot(frames, h);
      case Op::bye:
        return bye(frames, h);
      case Op::save:
        return save(frames, h);
    }
  }

  // A push or pull its worker sent again after its connection was lost (heartbeats, a cut link):
  // the first copy may have come, and only its answer been lost. One still waiting is answered,
  // when its turn comes, on the new connection; a push already applied is answered again with the
  // same status, and not applied twice. Workers number their requests from 1.
  bool answer_resent(std::vector<zmq::message_t>& frames, Header const& h) {
    if ((h.op != Op::push && h.op != Op::pull) || h.sequence == 0) return false;
    auto const waiting = std::find_if(waiting_.begin(), waiting_.end(), [&](Waiting const& w) {
      return w.worker == h.worker && w.sequence == h.sequence;
    });
    bool const answered = h.op == Op::push && last_push_[h.worker].sequence == h.sequence;
    if (waiting == waiting_.end() && !answered) return false;
    ++resent_;
    if (options_.log) {
      *options_.log << "convoy: " << name() << " got worker " << h.worker << "'s " << describe(h.op)
                    << " again (its connection was lost); answering it once" << std::endl;
    }
    if (waiting != waiting_.end()) {
      waiting->peer = std::move(frames[0]);
      return true;
    }
    auto const status = last_push_[h.worker].status;
    if constexpr (sync::elastic<Rules>) {
      // Its gradient is in the step still open, and its waiting answer was forgotten when its
      // worker was lost (a heartbeat dropped it): it waits for that step again, as any push does.
      if (status == Status::ok && rules_.contributed(h.worker) && h.tag == rules_.open_step()) {
        waiting_.push_back(Waiting{std::move(frames[0]), h.worker, Op::push, h.tag, h.sequence,
                                   0.0f, h.generation});
        return true;
      }
    }
    reply(frames[0], h, status,
          status == Status::stopped ? std::vector<zmq::message_t>{} : weights_frames());
    return true;
  }

  void hello(std::vector<zmq::message_t>& frames, Header const& h) {
    // A worker's probe (sequence 0, asked of a shard whose connection came back, to learn
    // whether it is the same process) comes from the same worker process: it keeps its numbers,
    // and the request it sent again on the new connection stays waiting.
    bool const probe = h.sequence == 0;
    if (h.fingerprint != fingerprint_ || h.text != optimizer_.name()) {
      reply_error(frames[0], h,
                  "convoy: worker " + std::to_string(h.worker) + " and " + name() +
                      " disagree on the model's variables, the optimizer (" + h.text + " vs " +
                      std::string(optimizer_.name()) +
                      ") or the cluster's size; run the same "
                      "program with the same options on every task");
      return;
    }
    // A worker's hello starts it anew: what its earlier process left waiting is nobody's, and it
    // numbers its requests from 1 again.
    if (!probe) {
      last_push_[h.worker] = {};
      forget_waiting(h.worker);
    }
    reply(frames[0], h, Status::ok, {});
  }

  // A worker counted as departed sends again (a restarted process, or a connection back after
  // heartbeats dropped it): it is live again, and takes the current weights and counters.
  void come_back(std::size_t worker) {
    departed_[worker] = 0;
    if (options_.log) {
      *options_.log << "convoy: " << name() << ": " << worker_name(worker)
                    << " is back, at global step " << counters_.global_step << std::endl;
    }
  }

  void init(std::vector<zmq::message_t>& frames, Header const& h) {
    check_payload(frames, h, 1);
    if (!initialized_) {
      std::vector<float> scratch;
      write_weights(frames, 2, scratch);
      initialized_ = true;
      if (options_.log) {
        *options_.log << "convoy: " << name() << " initialized by worker " << h.worker << std::endl;
      }
    }
    reply(frames[0], h, Status::ok, {});
    release();
  }

  void restore(std::vector<zmq::message_t>& frames, Header const& h) {
    std::size_t const slots = optimizer_.slot_names().size();
    check_payload(frames, h, 1 + slots);
    bool const pushes_wait = std::any_of(waiting_.begin(), waiting_.end(),
                                         [](Waiting const& w) { return w.op == Op::push; });
    if (h.generation == generation_ && pushes_wait) {
      reply_error(frames[0], h,
                  "convoy: " + name() + " cannot restore while workers' gradients wait for step " +
                      std::to_string(rules_.open_step() + 1) +
                      "; restore before the workers train (the chief does, when it resumes)");
      return;
    }
    if (h.local.size() != options_.workers) {
      throw ProtocolError("convoy: a restore for " + std::to_string(h.local.size()) +
                          " workers reached " + name() + " of " + std::to_string(options_.workers));
    }
    // The counters only grow from here, by one a step: a negative one, or one past 2^62 (more
    // steps than any run takes), would overflow, and the clock table reads its largest value as a
    // worker that said goodbye.
    auto const counter = [](std::int64_t v) { return v >= 0 && v <= (std::int64_t{1} << 62); };
    if (!counter(h.global_step) || !counter(h.applied) || !counter(h.dropped) ||
        !counter(h.optimizer_updates) || !std::all_of(h.local.begin(), h.local.end(), counter)) {
      throw ProtocolError("convoy: a restore to " + name() +
                          " carries a counter outside 0..2^62 "
                          "(global step " +
                          std::to_string(h.global_step) + ", " +
                          std::to_string(h.optimizer_updates) +
                          " optimizer updates); restore "
                          "from a checkpoint convoy wrote");
    }
    if (h.generation > generation_) roll_back(h);
    std::vector<float> scratch;
    write_weights(frames, 2, scratch);
    for (std::size_t s = 0; s < slots; ++s) {
      std::size_t at = 2 + (1 + s) * pieces_.size();
      for (auto const& p : pieces_) {
        auto const src = floats(frames[at++], scratch);
        std::copy(src.begin(), src.end(),
                  slots_.slots[s].begin() + static_cast<std::ptrdiff_t>(p.offset));
      }
    }
    slots_.updates = h.optimizer_updates;
    counters_.global_step = h.global_step;
    counters_.applied = h.applied;
    counters_.dropped = h.dropped;
    counters_.local_steps = h.local;
    rules_ = sync_.make_rules(counters_);
    for (std::size_t w = 0; w < options_.workers; ++w) {  // the restored steps do not wait for them
      if (!departed_[w]) continue;
      if constexpr (sync::elastic<Rules>) {
        rules_.leave(w);
      } else {
        rules_.retire(w);
      }
    }
    sum_empty_ = true;
    loss_sum_ = 0.0f;
    initialized_ = true;
    reply(frames[0], h, Status::ok, {});
    release();
  }

  void push(std::vector<zmq::message_t>& frames, Header const& h) {
    check_payload(frames, h, 1);
    if (!initialized_) {
      throw ProtocolError("convoy: a push reached " + name() +
                          " before its weights were initialized");
    }
    void_earlier(h.worker, h.generation);
    if (waits(h.worker)) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " pushed to " + name() +
                          " while its previous request waits");
    }
    auto const w = h.worker;
    // A gradient for a step already applied is late whatever comes next (admit() drops it below);
    // one for the open step, when too few workers are left to complete it, ends the run.
    if (step_unreachable() && h.tag >= rules_.open_step()) {
      say_step_ends(0, 1);
      last_push_[w] = {h.sequence, Status::stopped};
      reply(frames[0], h, Status::stopped, {});
      return;
    }
    bool rejoins = false;
    if constexpr (sync::elastic<Rules>) rejoins = !rules_.member(w);
    auto const admission = rules_.admit(w, h.tag);
    if (rejoins && options_.log) {
      *options_.log << "convoy: " << name() << ": " << worker_name(w)
                    << " trains in the group again from step " << rules_.open_step() + 1 << " ("
                    << rules_.gradients_per_update() << " gradient(s) a step)" << std::endl;
    }
    std::vector<float> scratch;
    exec::Host const ctx;
    if (admission == sync::Admission::drop) {
      ++counters_.dropped;
      last_push_[w] = {h.sequence, Status::dropped};
      reply(frames[0], h, Status::dropped, weights_frames());
      return;
    }
    last_push_[w] = {h.sequence, Status::ok};
    ++counters_.local_steps[w];
    if (admission == sync::Admission::accumulate) {
      std::size_t at = 2;
      for (auto const& p : pieces_) {  // the step's first gradient is copied: no pass to clear
        auto const g = floats(frames[at++], scratch);
        float* dst = sum_.data() + p.offset;
        if (sum_empty_) {
          std::copy(g.begin(), g.end(), dst);
        } else {
          for (std::size_t i = 0; i < g.size(); ++i) dst[i] += g[i];
        }
      }
      sum_empty_ = false;
      loss_sum_ += h.loss;
      waiting_.push_back(
          Waiting{std::move(frames[0]), w, Op::push, h.tag, h.sequence, 0.0f, h.generation});
      if (!rules_.accumulated(w)) {
        // A worker back in the group needs the others' gradients too: with too few left (the
        // others said goodbye), the step can never complete, and waiting pushes hear so now.
        if (rejoins && failure_.empty() && step_unreachable()) {
          stop_waiting_pushes();
          last_push_[w].status = Status::stopped;
        }
        return;
      }
      apply_open_step();
    } else {
      auto& weights = writable();
      std::int64_t const update = ++slots_.updates;
      std::size_t at = 2;
      for (auto const& p : pieces_) {
        auto const g = floats(frames[at++], scratch);
        optimizer_.apply(ctx, std::span<float>(weights), g, slots_, p.offset, 1.0f, update);
      }
      ++counters_.global_step;
      ++counters_.applied;
      rules_.applied(w);
      waiting_.push_back(
          Waiting{std::move(frames[0]), w, Op::push, h.tag, h.sequence, h.loss, h.generation});
    }
    release();
  }

  // Applies the open step's sum, averaged over the gradients in it, and opens the next step.
  void apply_open_step() {
    auto const m = rules_.gradients_per_update();
    update_loss_ = loss_sum_ / static_cast<float>(m);
    loss_sum_ = 0.0f;
    auto& weights = writable();
    optimizer_.apply(exec::Host{}, std::span<float>(weights), std::span<float const>(sum_), slots_,
                     0, 1.0f / static_cast<float>(m), ++slots_.updates);
    sum_empty_ = true;
    ++counters_.global_step;
    counters_.applied += static_cast<std::int64_t>(m);
    rules_.applied(0);
  }

  void pull(std::vector<zmq::message_t>& frames, Header const& h) {
    check_payload(frames, h, 0);
    void_earlier(h.worker, h.generation);
    if (waits(h.worker)) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " pulled from " + name() +
                          " while its previous request waits");
    }
    waiting_.push_back(
        Waiting{std::move(frames[0]), h.worker, Op::pull, h.tag, h.sequence, 0.0f, h.generation});
    release();
  }

  void snapshot(std::vector<zmq::message_t>& frames, Header const& h) {
    check_payload(frames, h, 0);
    auto out = weights_frames();
    for (auto const& slot : slots_.slots) {
      for (auto const& p : pieces_) {
        auto const n = p.end - p.begin;
        out.emplace_back(slot.data() + p.offset, n * sizeof(float));  // copied: slots change
      }
    }
    reply(frames[0], h, Status::ok, std::move(out));
  }

  // Writes this shard's part of a checkpoint, by variable name, into the directory the chief
  // names; the answer carries the part's file name for the chief's manifest. A part that cannot
  // be written (disk full, no permission) fails that save, not the shard: it is answered with the
  // reason and the shard serves on.
  void save(std::vector<zmq::message_t>& frames, Header const& h) {
    check_payload(frames, h, 0);
    io::PartView part{.step = h.global_step,
                      .shard = options_.index,
                      .shards = options_.shards,
                      .nonce = static_cast<std::uint64_t>(h.tag),
                      .optimizer = std::string(optimizer_.name())};
    for (auto const& slot : optimizer_.slot_names()) {
      part.slot_suffixes.push_back(optim::slot_suffix(slot));
    }
    std::span<float const> const weights(current_->data);
    for (auto const& p : pieces_) {
      auto const n = p.end - p.begin;
      io::PartPieceView piece{&p.variable, p.first, weights.subspan(p.offset, n), {}};
      for (auto const& slot : slots_.slots) {
        piece.slots.push_back(std::span<float const>(slot).subspan(p.offset, n));
      }
      part.pieces.push_back(std::move(piece));
    }
    std::string file;
    try {
      file = io::save_checkpoint_part(h.text, part);
    } catch (Error const& e) {
      if (options_.log) *options_.log << "convoy: " << name() << ": " << e.what() << std::endl;
      reply_error(frames[0], h,
                  "convoy: " + name() + " cannot write its checkpoint part: " + e.what());
      return;
    }
    reply(frames[0], h, Status::ok, {}, std::move(file));
  }

  void bye(std::vector<zmq::message_t>& frames, Header const& h) {
    if (std::find(goodbyes_.begin(), goodbyes_.end(), h.worker) == goodbyes_.end()) {
      goodbyes_.push_back(h.worker);
      rules_.retire(h.worker);
    }
    reply(frames[0], h, Status::ok, {});
    if (failure_.empty() && step_unreachable()) stop_waiting_pushes();
    release();
  }

  // A restore of a later generation: the chief rolls the cluster back to a checkpoint after a
  // shard lost its state. What waits from before is void (its workers connect again and pull the
  // restored state); the restore then replaces weights, slots, counters and the open step.
  void roll_back(Header const& h) {
    generation_ = h.generation;  // first: each refusal below tells its worker the new generation
    auto const voided =
        void_waiting([&](Waiting const& w) { return w.generation < h.generation; },
                     "convoy: " + name() + " was rolled back to a checkpoint by worker " +
                         std::to_string(h.worker) + "; this request is void");
    if (options_.log) {
      *options_.log << "convoy: " << name() << " rolled back to global step " << h.global_step
                    << " by worker " << h.worker << "'s restore (generation " << generation_
                    << "); " << voided << " waiting request(s) voided" << std::endl;
    }
  }

  // A worker whose request of a later generation comes while one of an earlier waits has connected
  // again after a shard lost its state: the earlier one is void. A worker keeps at most one
  // request waiting, whatever its generations.
  void void_earlier(std::uint32_t worker, std::uint64_t generation) {
    void_waiting([&](Waiting const& w) { return w.worker == worker && w.generation < generation; },
                 "convoy: worker " + std::to_string(worker) + " sent " + name() +
                     " a request of a later generation; this one is void");
  }

  // Answers the waiting requests `is_void` picks with an error saying `why`, and drops them.
  template <class Pick>
  std::size_t void_waiting(Pick is_void, std::string const& why) {
    std::size_t voided = 0;
    for (std::size_t i = 0; i < waiting_.size();) {
      if (!is_void(waiting_[i])) {
        ++i;
        continue;
      }
      reply_error(waiting_[i].peer, waiting_[i].request(), why);
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      ++voided;
    }
    return voided;
  }

  // The open step can never complete: drop what it summed and tell its waiting workers. Said in
  // the log only when it drops something: at a clean finish the first goodbye leaves the open step
  // short of workers too, with nothing in it.
  void stop_waiting_pushes() {
    std::size_t discarded = 0, stopped = 0;
    if constexpr (sync::discards_open_step<Rules>) discarded = rules_.discard();
    counters_.dropped += static_cast<std::int64_t>(discarded);
    sum_empty_ = true;
    loss_sum_ = 0.0f;
    for (std::size_t i = 0; i < waiting_.size();) {
      if (waiting_[i].op != Op::push) {
        ++i;
        continue;
      }
      reply(waiting_[i].peer, waiting_[i].request(), Status::stopped, {});
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      ++stopped;
    }
    if (discarded > 0 || stopped > 0) say_step_ends(discarded, stopped);
  }
  // Once a run: later pushes for the open step are told to stop without a line each.
  void say_step_ends(std::size_t discarded, std::size_t stopped) {
    if (said_step_ends_ || !options_.log) return;
    said_step_ends_ = true;
    *options_.log << "convoy: " << name() << " ends the open step: " << live_workers()
                  << " worker(s) left, fewer than the " << rules_.gradients_per_update()
                  << " it needs; " << discarded << " gradient(s) dropped, " << stopped
                  << " worker(s) told to stop" << std::endl;
  }

  // Answers every waiting request the rules now allow.
  void release() {
    for (std::size_t i = 0; i < waiting_.size();) {
      auto& wait = waiting_[i];
      bool ready = initialized_ && wait.generation <= generation_;
      if (ready && wait.op == Op::push) {
        if (rules_.accumulates()) {
          ready = rules_.open_step() != wait.tag;  // its step was applied
        } else {
          ready = rules_.may_start(wait.worker);  // bounded staleness holds a leader back
        }
      }
      if (!ready) {
        ++i;
        continue;
      }
      if constexpr (sync::bounds_staleness<Rules>) {
        if (wait.op == Op::push) largest_lead_ = std::max(largest_lead_, rules_.lead(wait.worker));
      }
      if (wait.op == Op::push && !rules_.accumulates()) update_loss_ = wait.loss;
      reply(wait.peer, wait.request(), Status::ok, weights_frames());
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  void check_payload(std::vector<zmq::message_t> const& frames, Header const& h,
                     std::size_t arrays) const {
    if (frames.size() - 2 != arrays * pieces_.size()) {
      throw ProtocolError("convoy: a " + describe(h.op) + " to " + name() + " carries " +
                          std::to_string(frames.size() - 2) + " payload frames, expected " +
                          std::to_string(arrays * pieces_.size()));
    }
    std::size_t at = 2;
    for (std::size_t a = 0; a < arrays; ++a) {
      for (auto const& p : pieces_) {
        check_floats(
            frames[at++], p.end - p.begin,
            "the payload of '" + p.variable + "' in a " + describe(h.op) + " to " + name());
      }
    }
  }

  void write_weights(std::vector<zmq::message_t> const& frames, std::size_t at,
                     std::vector<float>& scratch) {
    auto& weights = writable();
    for (auto const& p : pieces_) {
      auto const src = floats(frames[at++], scratch);
      std::copy(src.begin(), src.end(), weights.begin() + static_cast<std::ptrdiff_t>(p.offset));
    }
  }

  // The weights, for writing: the current buffer when no send holds it, else a copy of it in a
  // buffer no send holds (one copy, only when ZeroMQ has not finished sending the last answer).
  convoy::detail::AlignedVector<float>& writable() {
    if (current_->lent.load(std::memory_order_acquire) == 0) return current_->data;
    std::shared_ptr<LentBuffer> spare;
    for (auto& b : spares_) {
      if (b->lent.load(std::memory_order_acquire) == 0) {
        spare = b;
        break;
      }
    }
    if (!spare) {
      spare = std::make_shared<LentBuffer>();
      spares_.push_back(spare);
    }
    spare->data.assign(current_->data.begin(), current_->data.end());
    std::swap(current_, spare);
    // `spare` now holds the old buffer: it stays in spares_ (or joins it) until its sends finish.
    if (std::find(spares_.begin(), spares_.end(), spare) == spares_.end()) spares_.push_back(spare);
    spares_.erase(std::remove(spares_.begin(), spares_.end(), current_), spares_.end());
    return current_->data;
  }

  // One frame per piece lending the current weights to ZeroMQ; each frame holds the buffer until
  // ZeroMQ has sent it.
  std::vector<zmq::message_t> weights_frames() {
    std::vector<zmq::message_t> out;
    out.reserve(pieces_.size());
    for (auto const& p : pieces_) {
      auto* hold = new std::shared_ptr<LentBuffer>(current_);
      current_->lent.fetch_add(1, std::memory_order_relaxed);
      out.push_back(lend(std::span<float const>(current_->data).subspan(p.offset, p.end - p.begin),
                         &give_back, hold));
    }
    return out;
  }
  static void give_back(void*, void* hint) {
    auto* hold = static_cast<std::shared_ptr<LentBuffer>*>(hint);
    (*hold)->lent.fetch_sub(1, std::memory_order_release);
    delete hold;
  }

  void reply(zmq::message_t& peer, Header const& request, Status status,
             std::vector<zmq::message_t> payload, std::string text = {}) {
    Header h;
    h.op = request.op;
    h.status = status;
    h.worker = request.worker;
    h.sequence = request.sequence;
    h.shard = static_cast<std::uint32_t>(options_.index);
    h.tag = rules_.open_step();
    h.fingerprint = fingerprint_;
    h.frames = static_cast<std::uint32_t>(payload.size());
    h.loss = update_loss_;
    h.global_step = counters_.global_step;
    h.applied = counters_.applied;
    h.dropped = counters_.dropped;
    h.optimizer_updates = slots_.updates;
    h.initialized = initialized_ ? 1 : 0;
    h.generation = generation_;
    h.instance = instance_;
    h.local = counters_.local_steps;
    h.text = std::move(text);
    send(peer, h, std::move(payload));
  }
  void reply_error(zmq::message_t& peer, Header const& request, std::string const& why) {
    Header h;
    h.op = request.op;
    h.status = Status::error;
    h.worker = request.worker;
    h.sequence = request.sequence;
    h.shard = static_cast<std::uint32_t>(options_.index);
    h.generation = generation_;
    h.instance = instance_;
    h.text = why;
    send(peer, h, {});
  }
  void send(zmq::message_t& peer, Header const& h, std::vector<zmq::message_t> payload) {
    if (outbox_) {  // handle_message(): the answer goes back to its caller, moved as send moves it
      auto& frames = outbox_->emplace_back();
      frames.push_back(std::move(peer));
      frames.push_back(encode(h));
      for (auto& f : payload) frames.push_back(std::move(f));
      return;
    }
    std::string const to = address_of(peer);  // before the send moves the identity
    try {
      // The first frame decides: a full queue refuses it (EAGAIN, sndtimeo 0), and once it is
      // taken the rest of the message is too.
      if (!socket_->send(peer, zmq::send_flags::sndmore)) {
        ++unsent_;
        peer_log_.note(to, "unread answer(s)",
                       "dropped an answer to a " + describe(h.op) + " naming worker " +
                           std::to_string(h.worker) + ": the peer does not read its answers");
        return;
      }
      socket_->send(encode(h), payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
      for (std::size_t i = 0; i < payload.size(); ++i) {
        socket_->send(payload[i],
                      i + 1 == payload.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
      }
    } catch (zmq::error_t const& e) {
      // The peer went away (EHOSTUNREACH): nobody is left to answer; the others carry on.
      peer_log_.note(to, "undeliverable answer(s)",
                     "could not answer a " + describe(h.op) + " naming worker " +
                         std::to_string(h.worker) + ": " + e.what());
    }
  }

  Options options_;
  optim::Optimizer optimizer_;
  Sync sync_;
  std::uint64_t fingerprint_;
  std::vector<place::Piece> pieces_;
  std::size_t elements_ = 0;
  std::shared_ptr<LentBuffer> current_;
  std::vector<std::shared_ptr<LentBuffer>> spares_;
  optim::OptimizerState slots_;
  Counters counters_;
  Rules rules_;
  std::vector<zmq::message_t> frames_;  // serve()'s message being handled, reused
  convoy::detail::AlignedVector<float> sum_;
  bool sum_empty_ = true;  ///< sum_ holds no gradient of the open step: the next one is copied
  float loss_sum_ = 0.0f;
  float update_loss_ = 0.0f;
  bool initialized_ = false;
  std::uint64_t generation_ = 0;   ///< rollbacks to a checkpoint so far (see Header::generation)
  std::uint64_t const instance_ =  ///< drawn once per process (see Header::instance)
      std::random_device{}() | std::uint64_t{std::random_device{}()} << 32;
  std::vector<Waiting> waiting_;
  std::vector<std::size_t> goodbyes_;
  std::vector<char> departed_ = std::vector<char>(options_.workers, 0);  ///< lost, counted gone
  std::string failure_;  ///< set when a lost worker ended the run (on_loss: fail)
  std::int64_t malformed_ = 0;
  std::int64_t refused_ = 0;
  std::int64_t lost_ = 0;
  std::int64_t resent_ = 0;
  std::int64_t unsent_ = 0;
  std::int64_t over_cap_ = 0;                   ///< connections closed at once: the cap was reached
  comm::detail::ConnectionCap connections_{0};  ///< capped at connection_cap(), from serve()
  PeerLog peer_log_{options_.log, "ps:" + std::to_string(options_.index)};
  struct {
    std::string identity, address;
  } sender_;  ///< the message being handled: its connection, and its peer's address for the log
  std::vector<LastPush> last_push_ = std::vector<LastPush>(options_.workers);
  std::map<int, Peer> peers_;  ///< connections by file descriptor
  /// Per worker: a fingerprinted request of its came on some connection (its hello, at least).
  std::vector<char> spoken_ = std::vector<char>(options_.workers, 0);
  std::set<std::string> closed_;   ///< identities of lost workers' closed connections
  bool said_step_ends_ = false;    ///< stop_waiting_pushes() logged
  std::int64_t largest_lead_ = 0;  ///< bounded staleness: the most clocks a released worker led by
  zmq::socket_t* socket_ = nullptr;
  std::vector<std::vector<zmq::message_t>>* outbox_ = nullptr;  ///< handle_message()'s answers
  bool heard_worker_ = false;  ///< the message just handled was a worker's request
};

}  // namespace convoy::comm::zmq_ps
