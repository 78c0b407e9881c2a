// Which rank stopped answering, when a collective times out. NCCL only tells a rank that its own
// collective did not finish; it does not say who is missing. So every process of a run beats to a
// board kept by the first process, over ZeroMQ at the cluster's coordinator address: how many
// collectives it has issued so far. A rank whose collective timed out asks the board, and names
// the processes that have stopped beating (dead or frozen) and those that beat but have issued
// fewer collectives than the others (stuck in their own code before the exchange the others wait
// in). Every message carries the run's identity (run_identity.hpp): the board takes the beats,
// asks and goodbyes of its own run only, so a stranger can neither forge a process's goodbye or
// beats nor read the board. The board also sees each process's beating connection close: without
// a goodbye or a word that it leaves to regroup, the process has ended (a killed process's kernel
// closes it at once), which lets the survivors' regroup stop waiting for it (gone()). Plain C++
// over ZeroMQ: no NCCL or CUDA needed.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../cluster/host_lookup.hpp"
#include "../../core/error.hpp"
#include "../detail/connection_cap.hpp"
#include "../detail/zmq_poll.hpp"
#include "run_identity.hpp"
#include "run_key.hpp"

namespace convoy::comm::bootstrap {

struct LivenessOptions {
  std::chrono::milliseconds interval{1000};  ///< between two beats of a process
  std::chrono::milliseconds answer{2000};    ///< how long an ask waits for the board
  /// A process is taken for stopped once its last beat is this many intervals old.
  int missed_beats = 3;
  /// How explain() names process p, when given: "worker:1 at 10.0.0.2:2223"; else "process p".
  std::vector<std::string> names{};
  /// The run's identity (run_identity()): in every message, and the board's answers must carry it.
  std::string run{};
};

namespace detail {
inline constexpr std::string_view liveness_tag = "convoy-liveness/1";
inline std::string frame(zmq::message_t const& m) { return std::string(m.to_string_view()); }

// One message [tag, run, kind, process, issued] to the board at `address` on a fresh socket (whose
// queue is empty: it is taken), and the board's answer [tag, run, payload] within `wait`: the
// answer's run and payload, or nothing. Answers over 1 MiB (a stranger's) are refused by ZeroMQ.
inline std::optional<std::pair<std::string, std::string>> ask_board(
    std::string const& address, std::string_view run, std::string_view kind,
    std::string const& process, std::string const& issued, std::chrono::milliseconds wait,
    std::optional<RunKey> const& key) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, std::int64_t{1} << 20);
  connect_under(socket, key);
  socket.connect("tcp://" + address);
  socket.send(zmq::buffer(liveness_tag), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(run), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(kind), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(process), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(issued), zmq::send_flags::none);
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  comm::detail::poll(&item, 1, wait);
  std::vector<zmq::message_t> answer;
  if ((item.revents & ZMQ_POLLIN) == 0 ||
      !zmq::recv_multipart(socket, std::back_inserter(answer), zmq::recv_flags::dontwait) ||
      answer.size() != 3 || frame(answer[0]) != liveness_tag)
    return std::nullopt;
  return std::pair{frame(answer[1]), frame(answer[2])};
}
}  // namespace detail

/// What the board knows of one process when asked.
struct ProcessLiveness {
  int process = 0;
  std::int64_t issued = -1;     ///< collectives issued by its last beat; -1: never heard of
  std::int64_t silent_ms = -1;  ///< since its last beat; -1: never heard of
  bool left = false;  ///< said goodbye: it ended (well or with an error of its own), not died
};

/// The first process's side: a thread that keeps every process's latest beat and answers asks
/// with the whole board. Binds `address` ("host:port"); throws Error when it cannot.
class LivenessBoard {
 public:
  /// The largest frame the board takes; a peer that sends a larger one is disconnected.
  static constexpr std::int64_t max_frame_bytes = 4096;

  /// `max_connections`: connections held at once (0: four a process and 16 more, within the
  /// file limit); beyond it the oldest one that has sent nothing valid is closed (see
  /// comm/detail/connection_cap.hpp), so idle strangers cannot take the process's descriptors.
  /// `run`: the run's identity; a message of another run is dropped, and the first one logged.
  LivenessBoard(std::string const& address, int processes, std::size_t max_connections = 0,
                std::string run = {})
      : socket_(context_, zmq::socket_type::router),
        connections_(std::min(
            comm::detail::file_room(),
            max_connections ? max_connections : 4 * static_cast<std::size_t>(processes) + 16)),
        board_(static_cast<std::size_t>(processes)),
        address_(address),
        run_(std::move(run)) {
    socket_.set(zmq::sockopt::linger, 0);
    // A beat, an ask and a goodbye are a few dozen bytes: ZeroMQ drops a peer that announces a
    // larger frame before it allocates it (a frame declared at 4 GiB took gigabytes before).
    socket_.set(zmq::sockopt::maxmsgsize, max_frame_bytes);
    if (auto const key = run_key()) {
      gate_.emplace(context_, *key, "the liveness board at " + address);
      serve_under(socket_, key);
    }
    events_ = comm::detail::watch_connections(context_, socket_, "inproc://convoy-liveness-board",
                                              "the liveness board");
    try {
      socket_.bind(zmq_bind_endpoint(address, "the liveness board's address"));
    } catch (zmq::error_t const& e) {
      throw Error("convoy: the liveness board cannot listen at " + address + ": " + e.what());
    }
    for (int p = 0; p < processes; ++p) board_[static_cast<std::size_t>(p)].process = p;
    thread_ = std::jthread([this](std::stop_token stop) { serve(stop); });
  }
  LivenessBoard(LivenessBoard const&) = delete;
  LivenessBoard& operator=(LivenessBoard const&) = delete;

  /// After a failed run, before the board goes: keeps answering until every other process has
  /// said goodbye or stopped beating for `stale`, at most `at_most`, so that the processes still
  /// finding out what happened can ask it who died (and do not blame the board's own process).
  void linger(std::chrono::milliseconds stale, std::chrono::milliseconds at_most) {
    auto const until = std::chrono::steady_clock::now() + at_most;
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard lock(mutex_);
        auto const now = std::chrono::steady_clock::now();
        bool const settled = std::ranges::all_of(board_, [&](Entry const& e) {
          return e.process == 0 || e.left || e.issued < 0 || now - e.last > stale;
        });
        if (settled) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

 private:
  struct Entry {
    int process = 0;
    std::int64_t issued = -1;
    std::chrono::steady_clock::time_point last{};
    bool left = false;
    bool regrouping = false;  // said it leaves to regroup: its connection closing is not its end
    bool hung_up = false;     // the connection it beat on closed, with no beat since
  };

  void serve(std::stop_token stop) {
    while (!stop.stop_requested()) {
      zmq::pollitem_t items[2] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                                  {events_.handle(), 0, ZMQ_POLLIN, 0}};
      comm::detail::poll(items, 2, std::chrono::milliseconds(50));
      // Every connection event first: a descriptor is reused as soon as it closes.
      if (items[1].revents & ZMQ_POLLIN) {
        for (int n = 0; n < 10000; ++n) {
          auto const event = comm::detail::next_connection_event(events_);
          if (!event) break;
          if (event->fd >= 0) connection_event(*event);
        }
      }
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> message;
      if (zmq::recv_multipart(socket_, std::back_inserter(message), zmq::recv_flags::dontwait))
        take(message);
    }
  }

  // One message of the board's socket, answered when it is an ask.
  void take(std::vector<zmq::message_t>& message) {
    // [identity] [tag] [run] [beat|ask|bye|regroup|join] [process] [issued]; anything else is
    // dropped.
    if (message.size() != 6 || detail::frame(message[1]) != detail::liveness_tag) return;
    auto const kind = detail::frame(message[3]);
    if (kind == "join") {
      joining(message);
      return;
    }
    int process = -1;
    std::int64_t issued = -1;
    try {
      process = std::stoi(detail::frame(message[4]));
      issued = std::stoll(detail::frame(message[5]));
    } catch (std::exception const&) {
      return;
    }
    if (process < 0 || static_cast<std::size_t>(process) >= board_.size()) return;
    if (message[2].to_string_view() != run_) {
      // A process of an earlier group of this run (one left behind, resumed) beats on to the
      // address until it regroups: not a stranger.
      if (run_of(message[2].to_string_view()) != run_of(run_)) stranger(message[1], kind, process);
      return;
    }
    // A message read after its connection's close (the events come first, on a pipe of their
    // own) names no open connection: its descriptor may be another's next.
    auto const fd = message[1].get(ZMQ_SRCFD);
    bool const open = open_.contains(fd);
    if (open) identified_.insert(fd);
    if (kind == "beat" && open) beating_[fd] = process;  // the connection a process beats on
    std::lock_guard lock(mutex_);
    auto& entry = board_[static_cast<std::size_t>(process)];
    entry.issued = std::max(entry.issued, issued);
    entry.last = std::chrono::steady_clock::now();
    if (kind == "beat" && open) entry.hung_up = false;
    if (kind == "bye") entry.left = true;
    if (kind == "regroup") entry.regrouping = true;
    if (kind != "ask") return;
    std::ostringstream text;
    auto const now = std::chrono::steady_clock::now();
    for (auto const& e : board_) {
      auto const silent =
          e.issued < 0
              ? -1
              : std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last).count();
      text << e.process << ' ' << e.issued << ' ' << silent << ' ' << (e.left ? 1 : 0) << '\n';
    }
    answer(message[0], text.str());
  }

  // A process started again that asks to join the group, naming its rank in the cluster and
  // the run's identity without the group's generation, which it cannot know: it is answered with
  // the group's run identity, and its rank kept until the group takes it in.
  void joining(std::vector<zmq::message_t>& message) {
    auto const base = run_of(run_);
    int rank = -1;
    try {
      rank = std::stoi(detail::frame(message[4]));
    } catch (std::exception const&) {
      return;
    }
    if (message[2].to_string_view() != base || rank < 0 || rank > 65535) {
      stranger(message[1], "join", rank);
      return;
    }
    identified_.insert(message[1].get(ZMQ_SRCFD));
    {
      std::lock_guard lock(mutex_);
      joiners_.insert(rank);
      has_joiners_ = true;
    }
    answer(message[0], "joining");
  }

  // [tag, run, payload] to the peer `identity` names; dropped when it cannot take it now.
  void answer(zmq::message_t& identity, std::string_view payload) {
    socket_.send(std::move(identity), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(detail::liveness_tag), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(run_), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  }

  // A message of another run, naming `process`: dropped and counted; the first one is said on
  // std::clog (a forged goodbye or beat would otherwise blame the wrong cause for a death).
  void stranger(zmq::message_t const& frame, std::string const& kind, int process) {
    if (strangers_.fetch_add(1) > 0) return;
    char const* peer = ::zmq_msg_gets(frame.handle(), "Peer-Address");
    std::clog << "convoy: the liveness board at " << address_ << " dropped a '" << kind
              << "' naming process " << process << " from " << (peer ? peer : "a peer")
              << " of another run (its run identity differs: another run, or a task without the "
                 "run's CONVOY_RUN_TOKEN); later ones are counted, not logged"
              << std::endl;
  }

  // An accepted connection beyond the cap closes an idle stranger (said once on std::clog, and
  // counted); a closed one is forgotten.
  void connection_event(comm::detail::ConnectionEvent const& event) {
    if (!event.accepted) {
      connections_.closed(event.fd);
      identified_.erase(event.fd);
      open_.erase(event.fd);
      if (auto const beat = beating_.find(event.fd); beat != beating_.end()) {
        std::lock_guard lock(mutex_);
        board_[static_cast<std::size_t>(beat->second)].hung_up = true;
        beating_.erase(beat);
      }
      return;
    }
    open_.insert(event.fd);
    auto const shut =
        connections_.accepted(event.fd, [&](int fd) { return identified_.contains(fd); });
    if (!shut) return;
    identified_.erase(shut->fd);
    open_.erase(shut->fd);
    if (over_cap_.fetch_add(1) == 0) {
      std::clog << "convoy: the liveness board at " << address_ << " holds at most "
                << connections_.cap() << " connections; it closed "
                << (shut->newest ? "a new one" : "an idle one") << " from " << shut->address
                << " that had sent nothing (later ones are counted, not logged)" << std::endl;
    }
  }

 public:
  /// Connections closed because the cap was reached.
  std::int64_t over_cap() const { return over_cap_.load(); }
  /// Messages dropped because they came from another run.
  std::int64_t strangers() const { return strangers_.load(); }
  /// Whether a process started again has asked to join (cheap: read at every step), and the
  /// cluster ranks of those that have.
  bool has_joiners() const { return has_joiners_.load(std::memory_order_relaxed); }
  std::vector<std::size_t> joiners() const {
    std::lock_guard lock(mutex_);
    return {joiners_.begin(), joiners_.end()};
  }
  /// The processes that have ended, as far as the board can tell: the connection each beat on
  /// closed, with no goodbye and no word that it leaves to regroup, and no beat since. A killed
  /// process is here within moments; a stopped one, or one cut off, is not (its connection
  /// stays open).
  std::vector<std::size_t> gone() const {
    std::lock_guard lock(mutex_);
    std::vector<std::size_t> out;
    for (auto const& e : board_)
      if (e.hung_up && !e.left && !e.regrouping) out.push_back(static_cast<std::size_t>(e.process));
    return out;
  }

 private:
  zmq::context_t context_;
  std::optional<KeyGate> gate_;  // under the run's key: checks the peers' keys, closed after them
  zmq::socket_t socket_;
  zmq::socket_t events_;  // socket_'s connections accepted and closed
  comm::detail::ConnectionCap connections_;
  std::set<int> identified_;    // descriptors a valid message came on
  std::map<int, int> beating_;  // descriptor -> the process that beats on it (serving thread)
  std::set<int> open_;          // descriptors of the connections open now (serving thread)
  std::atomic<std::int64_t> over_cap_{0};
  std::atomic<std::int64_t> strangers_{0};
  std::set<std::size_t> joiners_;  // under mutex_
  std::atomic<bool> has_joiners_{false};
  mutable std::mutex mutex_;  // board_ and joiners_, between the serving thread and the others
  std::vector<Entry> board_;
  std::string address_;
  std::string run_;
  std::jthread thread_;  // last: stopped first
};

/// Every process's side: a thread that beats to the board every interval with `issued()`, the
/// collectives this process has issued so far; and, after a timeout, explain(), which asks the
/// board who is missing.
class LivenessReporter {
 public:
  LivenessReporter(std::string const& address, int process, std::function<std::int64_t()> issued,
                   LivenessOptions options = {})
      : address_(address),
        process_(process),
        issued_(std::move(issued)),
        options_(options),
        key_(run_key()) {
    thread_ = std::jthread([this](std::stop_token stop) { beat(stop); });
  }
  LivenessReporter(LivenessReporter const&) = delete;
  LivenessReporter& operator=(LivenessReporter const&) = delete;
  /// Stops beating and tells the board this process ended on its own (well, or with an error it
  /// reports itself), so that explain() tells that end from a death. Blocks for at most 200 ms.
  void say_goodbye() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
    try {
      zmq::context_t context;
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::linger, 200);
      connect_under(socket, key_);
      socket.connect("tcp://" + address_);
      (void)send(socket, "bye");
    } catch (zmq::error_t const&) {  // no board to tell: nothing to do
    }
  }

  /// Stops beating and tells the board, on the connection it beat on, that this process leaves to
  /// regroup: its connection closing is then not taken for its end. Blocks for at most 50 ms.
  void leave_to_regroup() {
    regrouping_ = true;
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }

  /// The board as the first process sees it now. Throws TimeoutError when it does not answer
  /// within options.answer.
  std::vector<ProcessLiveness> ask() const {
    auto const answer = detail::ask_board(address_, options_.run, "ask", std::to_string(process_),
                                          std::to_string(issued_()), options_.answer, key_);
    if (!answer || answer->first != options_.run) {
      throw TimeoutError("convoy: the liveness board of process 0 at " + address_ +
                         " did not answer within " + std::to_string(options_.answer.count()) +
                         " ms");
    }
    std::vector<ProcessLiveness> board;
    std::istringstream text(answer->second);
    ProcessLiveness p;
    int left = 0;
    while (text >> p.process >> p.issued >> p.silent_ms >> left) {
      p.left = left != 0;
      board.push_back(p);
    }
    return board;
  }

  /// explain(), after a collective failed at once (a peer's connection closed) rather than timed
  /// out: waits up to `patience` for a process that has not said goodbye to miss its beats, since
  /// one killed a moment ago still looks alive, then explains. A process that has never beaten is
  /// given as long as one that stopped: a live one beats within its first interval, so waiting
  /// the rest of `patience` for it would only delay the same answer.
  std::string explain_after_failure(std::chrono::milliseconds patience) const {
    auto const stale = options_.interval * options_.missed_beats;
    auto const started = std::chrono::steady_clock::now();
    auto const until = started + patience;
    while (std::chrono::steady_clock::now() < until) {
      std::vector<ProcessLiveness> board;
      try {
        board = ask();
      } catch (TimeoutError const&) {
        break;  // explain() says what that means
      }
      bool const waited = std::chrono::steady_clock::now() - started > stale;
      bool const someone = std::ranges::any_of(board, [&](ProcessLiveness const& p) {
        return !p.left && p.process != process_ &&
               (p.silent_ms > stale.count() || (p.silent_ms < 0 && waited));
      });
      if (someone) break;
      std::this_thread::sleep_for(options_.interval);
    }
    return explain();
  }

  /// One sentence naming the processes that stopped beating, and those behind the others; what
  /// can be said when the board does not answer. For a TimeoutError's message.
  std::string explain() const {
    std::vector<ProcessLiveness> board;
    try {
      board = ask();
    } catch (TimeoutError const&) {
      return "the liveness board kept by " + name(0) + " at " + address_ +
             " does not answer either, so process 0 has most likely stopped";
    }
    auto const stale = options_.interval.count() * options_.missed_beats;
    std::int64_t most = -1;
    for (auto const& p : board) most = std::max(most, p.issued);
    std::string stopped, behind, left;
    for (auto const& p : board) {
      if (p.left) {
        left += (left.empty() ? "" : "; ") + name(p.process);
      } else if (p.silent_ms < 0) {
        stopped += (stopped.empty() ? "" : "; ") + name(p.process) + " never beat";
      } else if (p.silent_ms > stale) {
        stopped += (stopped.empty() ? "" : "; ") + name(p.process) + " has not beaten for " +
                   std::to_string(p.silent_ms) + " ms (last at " + std::to_string(p.issued) +
                   " collectives)";
      } else if (p.issued < most) {
        behind += (behind.empty() ? "" : "; ") + name(p.process) + " has issued " +
                  std::to_string(p.issued) + " collectives, the others up to " +
                  std::to_string(most);
      }
    }
    if (stopped.empty() && behind.empty()) {
      return "every process beats and has issued " + std::to_string(most) +
             " collectives: none is missing from the board's view" +
             (left.empty() ? std::string() : " (ended on their own: " + left + ")");
    }
    std::string out;
    if (!stopped.empty()) out = "stopped answering: " + stopped;
    if (!behind.empty()) {
      out += (out.empty() ? "" : "; ") + std::string("behind the others (stuck before the ") +
             "exchange they wait in): " + behind;
    }
    if (!left.empty()) out += "; ended on their own: " + left;
    return out;
  }

 private:
  std::string name(int p) const {
    auto const i = static_cast<std::size_t>(p);
    std::string const process = "process " + std::to_string(p);
    return i < options_.names.size() ? process + " (" + options_.names[i] + ")" : process;
  }

  // Never blocks: a DEALER whose board is not there queues up to its high-water mark and would
  // then block; a message whose first frame is taken is taken whole.
  bool send(zmq::socket_t& socket, std::string_view kind) const {
    auto const process = std::to_string(process_);
    auto const issued = std::to_string(issued_());
    auto const more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    if (!socket.send(zmq::buffer(detail::liveness_tag), more)) return false;
    socket.send(zmq::buffer(options_.run), more);
    socket.send(zmq::buffer(kind), more);
    socket.send(zmq::buffer(process), more);
    socket.send(zmq::buffer(issued), zmq::send_flags::dontwait);
    return true;
  }

  void beat(std::stop_token stop) {
    zmq::context_t context;
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndhwm, 4);  // beats are worth nothing once late: never queue many
    connect_under(socket, key_);
    socket.connect("tcp://" + address_);
    while (!stop.stop_requested()) {
      (void)send(socket, "beat");  // not taken while the board is away: the next one tries again
      auto const until = std::chrono::steady_clock::now() + options_.interval;
      while (!stop.stop_requested() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // On this connection, ahead of its closing, as ZeroMQ keeps a connection's messages in order.
    if (regrouping_) {
      socket.set(zmq::sockopt::linger, 50);
      (void)send(socket, "regroup");
    }
  }

  std::string address_;
  int process_;
  std::function<std::int64_t()> issued_;
  LivenessOptions options_;
  std::optional<RunKey> key_;  // read once: the thread and the goodbye must not throw
  std::atomic<bool> regrouping_{false};
  std::jthread thread_;  // last: stopped first
};

/// A process started again asks the board at `address` to be taken into the group, as cluster
/// worker rank `rank` of the run `run` (run_identity(), without a generation): the group's run
/// identity with its generation when the board answers within `wait`, nothing otherwise.
inline std::optional<std::string> knock(std::string const& address, std::string const& run,
                                        std::size_t rank, std::chrono::milliseconds wait) {
  auto const answer =
      detail::ask_board(address, run, "join", std::to_string(rank), "0", wait, run_key());
  if (!answer || answer->second != "joining" || run_of(answer->first) != run) return std::nullopt;
  return answer->first;
}

}  // namespace convoy::comm::bootstrap
