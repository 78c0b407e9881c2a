// Starting a collective run with the workers that are there (Gloo::start_workers): worker 0 serves
// a meeting at its address, as the rendezvous does, and once `start_workers` of the cluster's
// workers (itself among them) have asked, it waits a last call for more and answers each with the
// group that starts: the workers that asked, in the order of the cluster. A worker that asks after
// that is told the run started without it, and joins the group at a step boundary as a worker
// started again does (comm/gloo/engine.hpp), so the group grows to the cluster's size (or
// Gloo::max_workers) as its workers come. Without start_workers every worker of the cluster must
// meet, and this meeting is not held.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "../../core/error.hpp"
#include "regroup.hpp"
#include "rendezvous.hpp"
#include "run_key.hpp"

namespace convoy::comm::bootstrap {

/// ask_start()'s error for a worker that asked after the run started without it.
struct StartedWithout : Error {
  using Error::Error;
};

struct StartOptions {
  /// The run starts once this many workers have met, worker 0 among them.
  std::size_t start_workers = 1;
  /// Once they have, how long worker 0 waits for another before the group starts; it starts at
  /// once when every worker of the cluster has come.
  std::chrono::milliseconds last_call{2000};
  /// How long the meeting lasts at most, and how often a worker asks again; the run's identity.
  Options meeting{};
};

namespace detail {
inline constexpr std::string_view start_protocol = "convoy-start/1";

// The answer frames: "group" and the members, or "started" for a worker left out.
inline std::vector<std::vector<std::byte>> start_answer(std::string_view kind,
                                                        std::string_view text) {
  auto bytes = [](std::string_view s) {
    auto const* p = reinterpret_cast<std::byte const*>(s.data());
    return std::vector<std::byte>(p, p + s.size());
  };
  return {bytes(kind), bytes(text)};
}
}  // namespace detail

namespace detail {
// Worker 0's record of the meeting: who came, the group once it is made, who has its answer.
class StartMeeting {
 public:
  StartMeeting(std::string address, std::size_t workers, StartOptions const& options)
      : address_(std::move(address)), workers_(workers), options_(options) {}

  // Makes the group once enough workers came and the last call passed (or every worker came),
  // and says whether the meeting is over: every member has its answer and the linger passed.
  bool over(std::chrono::steady_clock::time_point now) {
    if (!group_ && came_.size() >= options_.start_workers &&
        (came_.size() == workers_ || now - last_came_ >= options_.last_call)) {
      group_ = Group{.workers = {came_.begin(), came_.end()}, .rank = 0, .generation = 0};
      group_->first_size = group_->workers.size();
    }
    if (group_ && !lingering_ && answered_.size() == group_->workers.size()) {
      lingering_ = now + 2 * options_.meeting.retry;  // an answer lost on a connection given up
    }
    return lingering_ && now >= *lingering_;
  }
  Group const& group() const { return *group_; }

  // Answers one request on `socket`.
  void answer(zmq::socket_t& socket, std::vector<zmq::message_t> const& request) {
    int const rank = requested_rank(request, start_protocol);
    if (group_ && rank < 0) {
      // A member that has its answer asks for the next meeting's (the Gloo addresses), at this
      // address, while worker 0 still lingers here: it asks again in a moment.
      send_answer(socket, "wait", "worker 0, finishing the run's start");
      return;
    }
    if (rank < 1 || static_cast<std::size_t>(rank) >= workers_) {
      send_answer(socket, "error",
                  "worker 0 at " + address_ + " starts workers 1.." + std::to_string(workers_ - 1) +
                      " speaking " + std::string(start_protocol) + "; the request was not that");
      return;
    }
    auto const& run = options_.meeting.run;
    if (request[2].to_string_view() != run) {
      send_answer(socket, "error",
                  "worker 0 at " + address_ + " starts another run: " +
                      other_run(request[2].to_string_view(), run, "worker 0",
                                "worker " + std::to_string(rank)));
      return;
    }
    auto const w = static_cast<std::size_t>(rank);
    if (!group_) {
      if (came_.insert(w).second) last_came_ = std::chrono::steady_clock::now();
      send_answer(socket, "wait", "the run's start");
      return;
    }
    bool const member = std::ranges::find(group_->workers, w) != group_->workers.end();
    send_answer(socket, start_protocol, run,
                start_answer(member ? "group" : "started", join(group_->workers)));
    if (member) answered_.insert(w);
  }

  // The error when the meeting's time ran out.
  TimeoutError timed_out(std::optional<RunKey> const& key) const {
    std::string list;
    for (std::size_t w = 0; w < workers_; ++w) {
      bool const missing = group_
                               ? std::ranges::find(group_->workers, w) != group_->workers.end() &&
                                     !answered_.contains(w)
                               : !came_.contains(w);
      if (missing) list += (list.empty() ? "" : ", ") + std::to_string(w);
    }
    return TimeoutError("convoy: worker 0 waited " +
                        std::to_string(options_.meeting.timeout.count()) + " ms at " + address_ +
                        " for the run to start with " + std::to_string(options_.start_workers) +
                        " of " + std::to_string(workers_) + " workers, but worker(s) " + list +
                        (group_ ? " never came back for the group" : " never asked") +
                        "; are they started, and can they reach that address?" + run_key_hint(key));
  }

 private:
  std::string address_;
  std::size_t workers_;
  StartOptions options_;
  std::set<std::size_t> came_{0};  // cluster worker ranks that asked
  std::set<std::size_t> answered_{0};
  std::chrono::steady_clock::time_point last_came_ = std::chrono::steady_clock::now();
  std::optional<Group> group_;
  std::optional<std::chrono::steady_clock::time_point> lingering_;
};
}  // namespace detail

/// Worker 0's side: serves the meeting at `address` for the cluster's `workers` workers and returns
/// the group that starts (generation 0; worker 0 its rank 0). Blocks until every member has had its
/// answer, then answers latecomers "started" for two more retry intervals. Throws TimeoutError when
/// fewer than start_workers came within options.meeting.timeout, naming those that did not.
inline Group serve_start(std::string const& address, std::size_t workers,
                         StartOptions const& options) {
  auto const key = run_key();
  zmq::context_t context;
  std::optional<KeyGate> gate;  // before the socket: it checks the keys of its peers
  if (key) gate.emplace(context, *key, "worker 0's meeting at " + address);
  zmq::socket_t socket(context, zmq::socket_type::rep);
  socket.set(zmq::sockopt::linger, 2000);
  socket.set(zmq::sockopt::maxmsgsize, options.meeting.max_request_bytes);
  serve_under(socket, key);
  try {
    socket.bind(zmq_bind_endpoint(address, "worker 0's address"));
  } catch (zmq::error_t const& e) {
    throw Error("convoy: worker 0 cannot serve the run's start at " + address + ": " + e.what());
  }
  auto const deadline = std::chrono::steady_clock::now() + options.meeting.timeout;
  detail::StartMeeting meeting(address, workers, options);
  for (;;) {
    auto const now = std::chrono::steady_clock::now();
    if (meeting.over(now)) return meeting.group();
    if (now >= deadline) throw meeting.timed_out(key);
    std::vector<zmq::message_t> request;
    if (detail::receive_request(socket, deadline - now, request)) meeting.answer(socket, request);
  }
}

/// Worker `rank`'s side (rank above 0): asks worker 0 at `address` until it answers with the group
/// that starts, which it returns. Throws StartedWithout when the run started without it (it asked
/// after the group was made, or after worker 0 moved on to connecting the group), TimeoutError
/// after options.meeting.timeout, ProtocolError for another run.
inline Group ask_start(std::string const& address, std::size_t rank, std::size_t workers,
                       StartOptions const& options) {
  std::vector<zmq::message_t> frames;
  try {
    frames = ask(address, static_cast<int>(rank), {}, options.meeting, detail::start_protocol,
                 "the run's start");
  } catch (ProtocolError const& e) {
    // Worker 0 connects the group that started (the Gloo addresses' rendezvous, at the same
    // address): that meeting is over.
    if (std::string_view(e.what()).find("the request was not that") != std::string_view::npos) {
      throw StartedWithout("convoy: worker " + std::to_string(rank) +
                           " asked to start after the run started without it");
    }
    throw;
  }
  auto text = [&](std::size_t i) { return std::string(frames.at(i).to_string_view()); };
  auto const members = frames.size() == 2 ? detail::split(text(1), workers) : std::nullopt;
  if (!members || members->empty() || members->front() != 0) {
    throw ProtocolError("convoy: worker " + std::to_string(rank) +
                        " got an answer from worker 0 at " + address + " that is not a group");
  }
  if (text(0) == "started") {
    throw StartedWithout("convoy: worker " + std::to_string(rank) +
                         " asked to start after the run started without it, with workers " +
                         text(1));
  }
  if (text(0) != "group" || std::ranges::find(*members, rank) == members->end()) {
    throw ProtocolError("convoy: worker " + std::to_string(rank) + " got the group '" + text(1) +
                        "' from worker 0 at " + address + ", which does not hold it");
  }
  auto group = detail::group_of(*members, rank, 0);
  group.first_size = members->size();
  return group;
}

}  // namespace convoy::comm::bootstrap
