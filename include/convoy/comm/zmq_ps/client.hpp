// A worker's connections to the parameter-server shards: one ZeroMQ DEALER socket per shard. Every
// exchange sends its request to every shard before it waits for any answer, so the shards work on
// it at the same time; every wait is bounded. A request whose connection is lost before its answer
// came (heartbeats, a cut link) is sent again, under the same number, and reaches the shard when
// the connection is back; the shard answers it once and applies it once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../core/error.hpp"
#include "../detail/zmq_poll.hpp"
#include "heartbeat.hpp"
#include "security.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

/// An answer: its header and its payload frames, read in place.
struct Reply {
  Header header;
  std::vector<zmq::message_t> payload;
};

/// Watches one shard socket's handshakes: ZeroMQ itself only reconnects after a refused or
/// failed one, so without this a refused worker would wait for its connect timeout.
class HandshakeWatch : public zmq::monitor_t {
 public:
  static constexpr int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED |
                                ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
  int refused = 0;  ///< the shard's ZAP handler refused this worker's key (its status code)
  int failed = 0;   ///< handshakes failed in a row (wrong server key, or mechanisms differ)
  /// A protocol error ended a handshake: ZeroMQ drops the connection for good, no retry follows.
  bool gave_up = false;

  void on_event_connected(zmq_event_t const&, char const*) override {
    pending_ = true;
    connected_ = true;
  }
  void on_event_handshake_failed_auth(zmq_event_t const& event, char const*) override {
    refused = event.value != 0 ? event.value : 400;
    fail();
  }
  void on_event_handshake_failed_no_detail(zmq_event_t const&, char const*) override { fail(); }
  void on_event_handshake_failed_protocol(zmq_event_t const&, char const*) override {
    fail();
    gave_up = true;
  }
  int lost = 0;  ///< connections lost after their handshake (heartbeats: the shard went silent)

  // A shard that meets another mechanism than its own (plaintext against CURVE) just hangs up.
  void on_event_disconnected(zmq_event_t const&, char const*) override {
    if (!pending_ && connected_) ++lost;
    fail();
    connected_ = false;
  }
  void on_event_handshake_succeeded(zmq_event_t const&, char const*) override {
    pending_ = false;
    failed = 0;
    ++handshakes;
  }
  int handshakes = 0;  ///< connections that completed their handshake (a shard back after a loss)

 private:
  void fail() {  // once per connection, however many events say so
    if (pending_) ++failed;
    pending_ = false;
  }
  bool pending_ = false;    ///< connected, handshake not finished
  bool connected_ = false;  ///< a connection is up (or handshaking)
};

class Client {
 public:
  /// A request's header for shard s, and its payload frames for shard s.
  using HeaderOf = std::function<Header(std::size_t)>;
  using PayloadOf = std::function<std::vector<zmq::message_t>(std::size_t)>;

  /// Handshakes that fail in a row before a worker gives up on a shard (each retry comes 100 ms
  /// after the last, so this takes well under a second).
  static constexpr int failed_handshakes_limit = 3;

  /// `endpoints`: each shard's "tcp://host:port"; `worker`: this worker's rank; `security`: CURVE
  /// keys, or none for plaintext.
  /// `heartbeat`: a shard silent this long is dropped, logged, and connected to again; 0: off.
  Client(std::vector<std::string> endpoints, std::uint32_t worker, std::ostream* log,
         std::optional<ClientSecurity> security = std::nullopt,
         std::chrono::milliseconds heartbeat = std::chrono::milliseconds(0))
      : endpoints_(std::move(endpoints)),
        worker_(worker),
        log_(log),
        security_(std::move(security)),
        heartbeat_(heartbeat),
        context_(1) {
    if (security_) require_curve();
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
      auto& s = sockets_.emplace_back(context_, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::reconnect_ivl, 100);       // first retry after 100 ms,
      s.set(zmq::sockopt::reconnect_ivl_max, 2000);  // then backing off to 2 s
      set_heartbeat(s, heartbeat_);
      if (security_) {
        s.set(zmq::sockopt::curve_serverkey, security_->server_public_key);
        s.set(zmq::sockopt::curve_publickey, security_->keys.public_key);
        s.set(zmq::sockopt::curve_secretkey, security_->keys.secret_key);
      }
      reported_lost_.push_back(0);
      down_since_.push_back(-1);
      instances_.push_back(0);
      auto& watch = *watches_.emplace_back(std::make_unique<HandshakeWatch>());
      watch.init(s, "inproc://convoy-handshakes-" + std::to_string(i), HandshakeWatch::events);
      s.connect(endpoints_[i]);
    }
  }
  Client(Client const&) = delete;
  Client& operator=(Client const&) = delete;
  // No wait for lent frames here: closing the sockets (linger 0) and the context drops whatever
  // is still queued, and the context's end waits until ZeroMQ has let go of every frame. Frames
  // queued for a shard that died would otherwise hold a worker that gives up on it.

  std::size_t shards() const { return endpoints_.size(); }
  std::string shard_name(std::size_t s) const {
    return "ps:" + std::to_string(s) + " at " + endpoints_[s].substr(6);
  }

  /// Sends `header` (op, tag, ...) with `payload(s)`'s frames to every shard, then waits for every
  /// answer. Throws TimeoutError naming the shards that did not answer within `timeout`, and
  /// Error for a shard that refused the request. `waiting` names what an answer waits for, for the
  /// timeout's message.
  std::vector<Reply> exchange(HeaderOf const& header, PayloadOf const& payload,
                              std::chrono::milliseconds timeout, std::string const& waiting) {
    send(header, payload);
    return receive(header, payload, timeout, waiting, false);
  }

  /// Says hello to every shard, waiting for each with a log line naming it at growing intervals,
  /// up to `timeout`. Throws TimeoutError naming the shards that never answered.
  std::vector<Reply> hello(HeaderOf const& header, std::chrono::milliseconds timeout) {
    HeaderOf const hello = [&](std::size_t s) {
      Header h = header(s);
      h.op = Op::hello;
      return h;
    };
    hellos_.clear();  // asked again of a shard that comes back (check_returned)
    for (std::size_t s = 0; s < shards(); ++s) hellos_.push_back(hello(s));
    send(hello, {});
    return receive(hello, {}, timeout, "to start", true);
  }

  /// Frames lending `data` to ZeroMQ; wait_until_sent() waits for ZeroMQ to be done with them.
  zmq::message_t lend_frame(std::span<float const> data) {
    lent_->fetch_add(1, std::memory_order_relaxed);
    return lend(data, &give_back, new std::shared_ptr<std::atomic<int>>(lent_));
  }
  /// Blocks until ZeroMQ holds no memory lent by lend_frame (it has sent it), or `limit` passes.
  /// Returns false on timeout.
  bool wait_until_sent(std::chrono::milliseconds limit) const {
    auto const deadline = std::chrono::steady_clock::now() + limit;
    for (int spins = 0; lent_->load(std::memory_order_acquire) != 0; ++spins) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      // A few turns for a send that is about to end, then naps: a spinning worker takes the core
      // from ZeroMQ's thread that is sending, and from the other tasks on the machine.
      if (spins < 16) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    return true;
  }

 private:
  // One request, numbered anew, to every shard before any answer is awaited.
  void send(HeaderOf const& header, PayloadOf const& payload) {
    ++sequence_;
    for (std::size_t s = 0; s < shards(); ++s) send_to(s, header, payload);
  }

  // The current request to shard s. Sent again after a lost connection, it waits in the socket's
  // queue until ZeroMQ has connected again.
  void send_to(std::size_t s, HeaderOf const& header, PayloadOf const& payload) {
    auto frames = payload ? payload(s) : std::vector<zmq::message_t>{};
    Header h = header(s);
    sent_generation_ = h.generation;
    op_ = h.op;
    h.worker = worker_;
    h.sequence = sequence_;
    h.shard = static_cast<std::uint32_t>(s);
    h.frames = static_cast<std::uint32_t>(frames.size());
    sockets_[s].send(encode(h), frames.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    for (std::size_t i = 0; i < frames.size(); ++i) {
      sockets_[s].send(frames[i],
                       i + 1 == frames.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
  }

  static void give_back(void*, void* hint) {
    auto* hold = static_cast<std::shared_ptr<std::atomic<int>>*>(hint);
    (*hold)->fetch_sub(1, std::memory_order_release);
    delete hold;
  }

  // What one request waits for: each shard's answer, the shards lost meanwhile, the first refusal.
  struct Waiting {
    using clock = std::chrono::steady_clock;
    Waiting(std::size_t shards, std::uint64_t request_generation)
        : replies(shards),
          done(shards, 0),
          lost_at(shards),
          resend(shards, 0),
          generation(request_generation) {}
    std::vector<Reply> replies;
    std::vector<char> done;
    // Per shard: when its connection was lost while this request waited (it was sent again).
    std::vector<std::optional<clock::time_point>> lost_at;
    // Per shard: lost, its request to be sent again once nothing that came before is left unread.
    std::vector<char> resend;
    std::string refusal;  // the first shard's refusal, thrown once every shard has answered
    std::uint64_t generation;
    clock::time_point start = clock::now();
    std::chrono::milliseconds next_note{1000};

    // Derived from done, never counted beside it: a shard that answers and leaves in one turn is
    // done once (a goodbye counts a shard that left as done, and its answer may be read after).
    bool pending() const { return std::find(done.begin(), done.end(), 0) != done.end(); }
  };

  std::vector<Reply> receive(HeaderOf const& header, PayloadOf const& payload,
                             std::chrono::milliseconds timeout, std::string const& waiting,
                             bool starting) {
    Waiting w(shards(), sent_generation_);
    while (w.pending()) {
      std::vector<zmq::pollitem_t> items;
      std::vector<std::size_t> which;
      for (std::size_t s = 0; s < shards(); ++s) {
        if (w.done[s]) continue;
        items.push_back({sockets_[s].handle(), 0, ZMQ_POLLIN, 0});
        which.push_back(s);
      }
      comm::detail::poll(items.data(), items.size(), std::chrono::milliseconds(100));
      note_lost(w);
      if (!starting) check_returned();
      if (op_ == Op::bye && !settle_goodbye(w)) break;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (items[i].revents & ZMQ_POLLIN) read_answer(w, which[i], waiting, starting);
      }
      resend_lost(w, header, payload);
      check_waited(w, timeout, waiting, starting);
    }
    if (!w.refusal.empty()) throw Error(w.refusal);
    return std::move(w.replies);
  }

  // A lost connection: the request is sent again, to the same process (a link that dropped and
  // came back answers a copy once) or to a restarted one, which check_returned's hello tells
  // apart; by resend_lost, once what came before the loss is read, for an answer among it must
  // not be asked for twice (a copy of a restore or save would be done twice).
  void note_lost(Waiting& w) {
    for (auto const s : check_handshakes(w.done)) {
      if (w.done[s]) continue;
      w.resend[s] = 1;
      if (!w.lost_at[s]) w.lost_at[s] = Waiting::clock::now();
    }
  }

  // A goodbye to a shard that is gone: it already left, its run over (this worker's process said
  // goodbye from another Trainer first); nothing waits for this one. False when none is left.
  bool settle_goodbye(Waiting& w) const {
    for (std::size_t s = 0; s < shards(); ++s) {
      if (!w.done[s] && down_since_[s] >= 0) w.done[s] = 1;
    }
    return w.pending();
  }

  // One message from shard s: this request's answer, or a stale one (a probe's answer, a late
  // answer to an earlier request), skipped. Throws StateLostError when the shard is another
  // process now, or was rolled back while this request waited; ProtocolError for a malformed one.
  void read_answer(Waiting& w, std::size_t s, std::string const& waiting, bool starting) {
    std::vector<zmq::message_t> frames;
    (void)zmq::recv_multipart(sockets_[s], std::back_inserter(frames));
    if (frames.empty() || w.done[s]) return;  // done: gone, counted by the goodbye rule
    Reply r;
    r.header = decode(frames[0], shard_name(s));
    if (!starting && instances_[s] != 0 && r.header.instance != instances_[s]) {
      throw StateLostError("convoy: worker " + std::to_string(worker_) + " lost " + shard_name(s) +
                           " while waiting for it " + waiting +
                           "; it is back as another process, which holds nothing of the "
                           "last one's state");
    }
    if (r.header.sequence == probe_sequence) return;  // the same process: wait on
    if (r.header.sequence != sequence_) return;       // a late answer to an earlier request
    instances_[s] = r.header.instance;
    if (!starting && r.header.generation > w.generation) {
      throw StateLostError("convoy: " + shard_name(s) + " was rolled back to a checkpoint " +
                           "while worker " + std::to_string(worker_) + " waited for it " + waiting +
                           " (generation " + std::to_string(r.header.generation) +
                           ", this request's " + std::to_string(w.generation) + ")");
    }
    if (r.header.status == Status::error && w.refusal.empty()) {
      w.refusal = "convoy: " + shard_name(s) + " refused worker " + std::to_string(worker_) +
                  "'s " + describe(r.header.op) + ": " + r.header.text;
    }
    if (r.header.frames != frames.size() - 1) {
      throw ProtocolError("convoy: " + shard_name(s) + " announced " +
                          std::to_string(r.header.frames) + " payload frames and sent " +
                          std::to_string(frames.size() - 1));
    }
    for (std::size_t f = 1; f < frames.size(); ++f) r.payload.push_back(std::move(frames[f]));
    if (w.lost_at[s] && log_) {
      auto const gone = std::chrono::duration_cast<std::chrono::milliseconds>(
          Waiting::clock::now() - *w.lost_at[s]);
      *log_ << "convoy: worker " << worker_ << " reached " << shard_name(s) << " again "
            << gone.count() << " ms after losing it; its " << describe(r.header.op)
            << " was sent again and answered" << std::endl;
    }
    w.replies[s] = std::move(r);
    w.done[s] = 1;
  }

  // One message a turn is read: a stale one may stand before this request's answer. A lost
  // shard's request is sent again only when none is left.
  void resend_lost(Waiting& w, HeaderOf const& header, PayloadOf const& payload) {
    for (std::size_t s = 0; s < shards(); ++s) {
      if (!w.resend[s] || w.done[s]) continue;
      if ((sockets_[s].get(zmq::sockopt::events) & ZMQ_POLLIN) != 0) continue;
      send_to(s, header, payload);
      w.resend[s] = 0;
    }
  }

  // Throws TimeoutError past `timeout`; while starting or while a shard is down, says on the log
  // whom it waits for, at 1, 2, 4... s.
  void check_waited(Waiting& w, std::chrono::milliseconds timeout, std::string const& waiting,
                    bool starting) const {
    if (!w.pending()) return;
    auto const waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Waiting::clock::now() - w.start);
    bool const shard_down =
        std::any_of(down_since_.begin(), down_since_.end(), [](std::int64_t d) { return d >= 0; });
    if (waited > timeout) {
      throw TimeoutError("convoy: worker " + std::to_string(worker_) + " waited " +
                         std::to_string(timeout.count()) + " ms for " + missing(w.done) + " " +
                         waiting + (shard_down ? "; a lost shard did not come back" : ""));
    }
    if ((starting || shard_down) && waited >= w.next_note && log_) {
      *log_ << "convoy: worker " << worker_ << " waiting for " << missing(w.done) << " ("
            << waited.count() / 1000 << " s so far)" << std::endl;
      w.next_note *= 2;
    }
  }

  // Throws Error for a shard that refused this worker's key or failed every handshake with it.
  // Returns the shards whose connection was lost since the last call.
  std::vector<std::size_t> check_handshakes(std::vector<char> const& done) {
    std::vector<std::size_t> lost;
    for (std::size_t s = 0; s < shards(); ++s) {
      auto& watch = *watches_[s];
      while (watch.check_event(0)) {
      }
      if (watch.lost > reported_lost_[s]) {
        reported_lost_[s] = watch.lost;
        lost.push_back(s);
        if (down_since_[s] < 0) down_since_[s] = watch.handshakes;
        if (log_ && op_ != Op::bye) {  // after the last goodbye the shards leave: no news
          *log_ << "convoy: worker " << worker_ << " lost " << shard_name(s) << ": ";
          if (heartbeat_.count() > 0) {
            *log_ << "silent for over " << heartbeat_.count() << " ms, or gone";
          } else {
            *log_ << "its connection closed";
          }
          *log_ << "; connecting again" << std::endl;
        }
      }
      if (done[s]) continue;
      if (watch.refused != 0) {
        throw Error("convoy: " + shard_name(s) + " refused this worker's key (worker " +
                    std::to_string(worker_) + ", public key " +
                    (security_ ? security_->keys.public_key : std::string("none")) +
                    ", ZAP status " + std::to_string(watch.refused) +
                    "): add its NAME.pub to the ps tasks' ZmqPs::security.authorized_keys");
      }
      if (watch.gave_up || watch.failed >= failed_handshakes_limit) {
        throw Error("convoy: " + shard_name(s) + " ended " + std::to_string(watch.failed) +
                    " handshake(s) in a row with worker " + std::to_string(worker_) +
                    (security_ ? ": ZmqPs::security.server_public_key is not the public key of "
                                 "that shard's server_secret_key, or the shard serves plaintext"
                               : ": the shard probably requires CURVE keys; give this worker "
                                 "ZmqPs::security.server_public_key and .client_secret_key"));
      }
    }
    return lost;
  }

  // A shard whose connection was lost and that completes a handshake again is asked hello once
  // more: an answer from another process (receive() compares Header::instance) means a restarted
  // ps task that holds nothing of the last one's state, and receive() throws StateLostError for
  // the engine to recover (Engine::State::recover); the same process (a connection that dropped
  // and came back) is waited on as before. A shard that never comes back leaves the wait to its
  // timeout, which names it.
  void check_returned() {
    for (std::size_t s = 0; s < shards(); ++s) {
      if (down_since_[s] < 0 || watches_[s]->handshakes <= down_since_[s]) continue;
      down_since_[s] = -1;
      if (s >= hellos_.size()) continue;
      Header h = hellos_[s];
      h.worker = worker_;
      h.sequence = probe_sequence;
      h.shard = static_cast<std::uint32_t>(s);
      h.frames = 0;
      sockets_[s].send(encode(h), zmq::send_flags::none);
    }
  }
  static constexpr std::uint64_t probe_sequence = 0;  ///< requests are numbered from 1

  std::string missing(std::vector<char> const& done) const {
    std::string out;
    for (std::size_t s = 0; s < shards(); ++s) {
      if (!done[s]) out += (out.empty() ? "" : ", ") + shard_name(s);
    }
    return out;
  }

  std::vector<std::string> endpoints_;
  std::uint32_t worker_;
  std::uint64_t sequence_ = 0;  ///< the current request's number; answers to others are dropped
  std::ostream* log_;
  std::optional<ClientSecurity> security_;
  std::chrono::milliseconds heartbeat_;
  std::vector<int> reported_lost_;  ///< per shard: lost connections already logged
  /// Per shard: -1 while connected, else its handshakes when the connection was lost.
  std::vector<std::int64_t> down_since_;
  std::uint64_t sent_generation_ = 0;     ///< the generation the current request carries
  std::vector<std::uint64_t> instances_;  ///< per shard: its process's number (0: not heard yet)
  std::vector<Header> hellos_;            ///< per shard: the hello it was sent
  Op op_ = Op::hello;                     ///< the current request's operation
  std::shared_ptr<std::atomic<int>> lent_ = std::make_shared<std::atomic<int>>(0);
  zmq::context_t context_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::unique_ptr<HandshakeWatch>> watches_;  ///< after sockets_: stopped first
};

}  // namespace convoy::comm::zmq_ps
