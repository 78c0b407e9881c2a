// A parameter-server shard: it holds its pieces of the variables and their optimizer slots, runs
// the optimizer on them, and drives the Sync policy's rule object (sync/rules.hpp) exactly as the
// in-process central store does, one message at a time on one thread, so it needs no lock. A push
// is answered with the weights it produced (push and pull in one round trip); an answer the rules
// hold back (the open synchronous step is not complete, or the worker leads the slowest by more
// than S clocks) waits in a queue until they allow it.
//
// Three parts, one concern each: this file's serving loop (the socket, the connection monitor,
// receiving, refusing and sending), the connections it serves (shard_peers.hpp), and the state
// machine that takes each request (shard_state.hpp, over the weights of shard_store.hpp), which
// never touches a socket.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../core/error.hpp"
#include "../../exec/host.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "../../sync/rules.hpp"
#include "../detail/connection_cap.hpp"
#include "../detail/zmq_poll.hpp"
#include "heartbeat.hpp"
#include "peer_log.hpp"
#include "security.hpp"
#include "shard_options.hpp"
#include "shard_peers.hpp"
#include "shard_state.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

template <class Sync>
class Shard {
 public:
  using Options = ShardOptions;
  using Rules = typename ShardState<Sync>::Rules;

  /// Descriptors a shard keeps for itself beyond its connections: ZeroMQ's own (its context, the
  /// socket, the monitor), a checkpoint part's file and directory, and the standard streams.
  static constexpr std::size_t reserved_descriptors = comm::detail::reserved_descriptors;

  Shard(std::vector<place::Piece const*> pieces, optim::Optimizer optimizer, Sync sync,
        Options options)
      : options_(std::move(options)), state_(pieces, optimizer, sync, options_) {}
  Shard(Shard const&) = delete;
  Shard& operator=(Shard const&) = delete;

  std::string name() const { return state_.name(); }
  Counters const& counters() const { return state_.counters(); }

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
    zmq::socket_t monitor =
        comm::detail::watch_connections(context, socket, "inproc://convoy-shard-peers", name());
    try {
      socket.bind(options_.endpoint);
    } catch (zmq::error_t const& e) {
      throw Error("convoy: " + name() + " cannot listen on " + options_.endpoint + ": " + e.what());
    }
    peers_.cap_at(
        shard_connection_cap(options_.max_connections, options_.workers, name(), options_.log));
    if (options_.log) {
      *options_.log << "convoy: " << name() << " serving " << state_.elements() * sizeof(float)
                    << " bytes of weights in " << state_.pieces().size() << " piece(s) on "
                    << options_.endpoint << " for " << options_.workers << " worker(s) under "
                    << Sync::name << "; " << options_.security.mode() << options_.cpu.describe()
                    << std::endl;
    }
    socket_ = &socket;
    auto last_heard = std::chrono::steady_clock::now();
    while (!state_.over()) {
      if (serve_turn(socket, monitor, zap)) last_heard = std::chrono::steady_clock::now();
      if (!state_.over() && std::chrono::steady_clock::now() - last_heard > state_.timeout()) {
        socket_ = nullptr;
        peer_log_.flush();  // the last summaries of refused messages, as on a clean end
        if (!state_.failure().empty()) throw Error(state_.failure());
        throw TimeoutError("convoy: " + name() + " heard from no worker for " +
                           std::to_string(state_.timeout().count()) + " ms; " +
                           state_.missing_workers());
      }
    }
    ::zmq_socket_monitor(socket.handle(), nullptr, 0);
    socket_ = nullptr;
    peer_log_.flush();
    if (!state_.failure().empty()) throw Error(state_.failure());
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
  std::int64_t resent() const { return state_.resent(); }

  /// Handles one message as serve() does, without a socket: `frames` as the ROUTER socket hands
  /// them over (the peer's identity, the header, the payload). Returns the answers sent meanwhile,
  /// each as the frames serve() would send (the addressee's identity first): the answer to this
  /// message, if it is answered now, and those of earlier requests it releases. Messages of more
  /// frames than serve() keeps are refused as serve() refuses them. Never blocks; not thread-safe,
  /// and never called while serve() runs. The fuzz targets (tests/fuzz) drive a shard through it.
  std::vector<std::vector<zmq::message_t>> handle_message(std::vector<zmq::message_t> frames) {
    bool const too_many = frames.size() > state_.most_frames();
    if (too_many) frames.resize(state_.most_frames());
    std::vector<std::vector<zmq::message_t>> sent;
    try {
      dispatch(frames, too_many);
    } catch (...) {
      state_.answers().clear();
      throw;
    }
    for (auto& answer : state_.answers()) {
      auto& out = sent.emplace_back();
      out.push_back(std::move(answer.peer));
      out.push_back(encode(answer.header));
      for (auto& f : answer.payload) out.push_back(std::move(f));
    }
    state_.answers().clear();
    return sent;
  }

 private:
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
    for (auto const& p : state_.pieces()) {
      largest = std::max(largest, (p.end - p.begin) * sizeof(float));
    }
    // Under CURVE the limit applies to the encrypted frame, which carries a command name, a nonce,
    // a MAC and a flags byte more: without this margin every frame of the largest piece dropped
    // its sender, silently, and training waited for its timeout.
    constexpr std::size_t curve_overhead = 64;
    socket.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(largest + curve_overhead));
    set_heartbeat(socket, options_.heartbeat);
    return socket;
  }

  // One turn of serve(): the ZAP handler's request, every connection event, then one message.
  // True when a worker's request was heard: a peer sending junk, or a lost worker's stale
  // messages, must not keep a shard whose workers are all gone waiting.
  bool serve_turn(zmq::socket_t& socket, zmq::socket_t& monitor, std::optional<ZapHandler>& zap) {
    zmq::pollitem_t items[3] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                {monitor.handle(), 0, ZMQ_POLLIN, 0},
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
      for (int n = 0; n < 10000 && connection_event(monitor); ++n) {
      }
    }
    if (!(items[0].revents & ZMQ_POLLIN)) return false;
    bool const too_many = receive_frames(socket);
    dispatch(frames_, too_many);
    send_answers();
    return std::exchange(heard_worker_, false);
  }

  // One message into frames_, frame by frame, keeping at most most_frames(). True when there
  // were more.
  bool receive_frames(zmq::socket_t& socket) {
    std::size_t const most = state_.most_frames();
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

  // Handles one event of the connection monitor, if one is there; returns whether one was.
  bool connection_event(zmq::socket_t& monitor) {
    auto const event = comm::detail::next_connection_event(monitor);
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
    auto const lost = peers_.closed(fd, [&](std::size_t w) { return state_.finished(w); });
    if (!lost) return;
    ++lost_;
    state_.lose(
        lost->worker,
        name() + " lost worker " + std::to_string(lost->worker) + " at " + lost->address + ": " +
            (options_.heartbeat.count() > 0
                 ? "silent for over " + std::to_string(options_.heartbeat.count()) + " ms, or gone"
                 : std::string("its connection closed")));
    send_answers();
  }
  // A new connection at the cap (ShardPeers::accepted).
  void accepted(int fd) {
    auto const shut = peers_.accepted(fd);
    if (!shut) return;
    ++over_cap_;
    peer_log_.note("peer " + shut->address, "connection(s) over the cap",
                   std::string(shut->newest ? "closed a new connection" : "closed an idle one") +
                       ": " + std::to_string(peers_.cap()) + " are open, its cap (" +
                       "ZmqPs::max_connections, or the file limit less " +
                       std::to_string(reserved_descriptors) + ")");
  }

  // One received message, of which at most most_frames() were kept (`too_many`: there were more).
  // Only a message whose header is convoy's is answered: junk gets no answer (a peer sending it
  // as fast as it can would otherwise get as many answers back), only a count and a line per peer
  // and interval (PeerLog), which names the peer by its address.
  void dispatch(std::vector<zmq::message_t>& frames, bool too_many) {
    if (frames.size() < 2) return;  // not a worker's message: drop it
    sender_ = {frames[0].to_string(), peer_address(frames[1])};
    // Read after its connection closed and its worker was lost: nobody is left to answer, and
    // taking it would make a dead worker look back.
    if (!too_many && peers_.lost_connection(frames[0].to_string_view())) return;
    Header h;
    try {
      h = decode(frames[1], "a peer of " + name());
    } catch (ProtocolError const& e) {  // not convoy's protocol: counted, no answer
      refuse(frames[0], nullptr,
             too_many ? frames_over(state_.most_frames()) : std::string(e.what()));
      return;
    }
    try {
      if (too_many) throw ProtocolError(frames_over(state_.most_frames()));
      check(frames, h);
      heard_worker_ = true;  // one of this run's workers, on a connection it may speak on
      state_.take(frames, h);
    } catch (ProtocolError const& e) {
      refuse(frames[0], &h, e.what());
    }
  }
  std::string frames_over(std::size_t most) const {
    return "convoy: a message to " + name() + " has more than " + std::to_string(most - 1) +
           " frames";
  }

  // Throws ProtocolError for a request this shard must not take: a worker it does not have, a
  // frame count other than announced, another layout (a goodbye too: one plaintext message naming
  // a worker would otherwise end its run), a goodbye on a connection that does not speak for its
  // worker, a step after a goodbye. Remembers the connection a worker's fingerprinted requests
  // come on.
  void check(std::vector<zmq::message_t>& frames, Header const& h) {
    if (h.worker >= options_.workers) {
      throw ProtocolError("convoy: " + name() + " has " + std::to_string(options_.workers) +
                          " workers; a message names worker " + std::to_string(h.worker));
    }
    if (h.frames != frames.size() - 2) {
      throw ProtocolError("convoy: a " + describe(h.op) + " announces " + std::to_string(h.frames) +
                          " payload frames and carries " + std::to_string(frames.size() - 2));
    }
    bool const fingerprinted = h.fingerprint == state_.fingerprint();
    if (h.op != Op::hello && !fingerprinted) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                          describe(h.op) + " for another layout than " + name() + "'s");
    }
    if (h.op == Op::bye && socket_) check_goodbye(frames[0], h.worker);
    // A lost connection is named by the worker whose fingerprinted requests came on it (a
    // hello's is checked in ShardState::hello()).
    if (socket_ && fingerprinted) peers_.remember(frames[0], frames[1], h.worker);
    // A worker's goodbye is its last message: the rules have retired it (a bounded-staleness
    // clock table marks it with its largest clock), so a step of its would corrupt them.
    if ((h.op == Op::push || h.op == Op::pull) && state_.finished(h.worker)) {
      throw ProtocolError("convoy: worker " + std::to_string(h.worker) + " sent a " +
                          describe(h.op) + " to " + name() + " after its goodbye");
    }
  }
  // Before the worker's own hello no connection speaks for it: a goodbye then would end the part
  // of a worker still on its way.
  void check_goodbye(zmq::message_t const& identity, std::size_t worker) const {
    std::string const bye = "convoy: a goodbye naming worker " + std::to_string(worker);
    if (!peers_.spoken(worker)) {
      throw ProtocolError(bye + " came before that worker said hello; ignored");
    }
    if (!peers_.speaks_for(identity, worker)) {
      throw ProtocolError(bye + " came on a connection that worker does not use; ignored");
    }
  }

  // A message refused: counted, noted once per peer and interval (PeerLog), and answered with an
  // error when its header is convoy's (`h`); junk gets no answer.
  void refuse(zmq::message_t& identity, Header const* h, std::string const& why) {
    ++malformed_;
    peer_log_.note(sender_.address, "refused message(s)", "dropped a message: " + why);
    if (h) state_.error(identity, *h, why);
  }

  // The answers the state machine released, in order. The first frame decides: a full queue
  // refuses it (EAGAIN, sndtimeo 0), and once it is taken the rest of the message is too.
  void send_answers() {
    for (auto& answer : state_.answers()) {
      Header const& h = answer.header;
      // The identity, kept before the send moves it (a few bytes: no allocation); its peer's
      // address is looked up only for a line about an answer that could not go.
      std::string const identity(answer.peer.to_string_view());
      auto const to = [&] {
        return identity == sender_.identity ? sender_.address : peers_.address_of(identity);
      };
      try {
        if (!socket_->send(answer.peer, zmq::send_flags::sndmore)) {
          ++unsent_;
          peer_log_.note(to(), "unread answer(s)",
                         "dropped an answer to a " + describe(h.op) + " naming worker " +
                             std::to_string(h.worker) + ": the peer does not read its answers");
          continue;
        }
        auto& payload = answer.payload;
        socket_->send(encode(h),
                      payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
        for (std::size_t i = 0; i < payload.size(); ++i) {
          socket_->send(payload[i],
                        i + 1 == payload.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
        }
      } catch (zmq::error_t const& e) {
        // The peer went away (EHOSTUNREACH): nobody is left to answer; the others carry on.
        peer_log_.note(to(), "undeliverable answer(s)",
                       "could not answer a " + describe(h.op) + " naming worker " +
                           std::to_string(h.worker) + ": " + e.what());
      }
    }
    state_.answers().clear();
  }

  // The last line: how the run ended and what was refused, dropped and lost on the way.
  std::string summary() const {
    auto const& counters = state_.counters();
    std::ostringstream line;
    line << "convoy: " << name() << " done: every worker said goodbye";
    if (state_.departed() > 0) line << " but " << state_.departed_names() << " (lost)";
    line << " at global step " << counters.global_step << " (" << counters.applied
         << " gradients applied, " << counters.dropped << " dropped, " << malformed_
         << " malformed messages";
    if (unsent_ > 0) line << ", " << unsent_ << " answers dropped unread";
    if (over_cap_ > 0) line << ", " << over_cap_ << " connection(s) over the cap closed";
    if (options_.security.keys) line << ", " << refused_ << " worker key(s) refused";
    line << ")";
    if constexpr (sync::bounds_staleness<Rules>) {
      line << "; largest lead granted " << state_.largest_lead() << " clock(s)";
    }
    return line.str();
  }

  // The peer's IP address, as ZeroMQ read it from the connection (a message built by hand, as
  // handle_message() takes, has none).
  std::string peer_address(zmq::message_t const& frame) const {
    char const* address = socket_ ? ::zmq_msg_gets(frame.handle(), "Peer-Address") : nullptr;
    return address ? std::string("peer ") + address : std::string("a peer");
  }

  Options options_;
  ShardState<Sync> state_;
  ShardPeers peers_{options_.workers};
  PeerLog peer_log_{options_.log, "ps:" + std::to_string(options_.index)};
  std::vector<zmq::message_t> frames_;  // serve()'s message being handled, reused
  struct {
    std::string identity, address;
  } sender_;  ///< the message being handled: its connection, and its peer's address for the log
  std::int64_t malformed_ = 0;
  std::int64_t refused_ = 0;
  std::int64_t lost_ = 0;
  std::int64_t unsent_ = 0;
  std::int64_t over_cap_ = 0;  ///< connections closed at once: the cap was reached
  zmq::socket_t* socket_ = nullptr;
  bool heard_worker_ = false;  ///< the message just handled was a worker's request
};

}  // namespace convoy::comm::zmq_ps
