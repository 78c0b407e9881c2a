// How the survivors of a collective run agree on their new group after one of them was lost, with
// no process that must survive: every survivor serves the agreement at its own address in the
// cluster (which only the group's rank 0 otherwise takes, for its rendezvous and liveness board)
// and asks the lower ranks of the last group in turn, taking one that stays silent for a moment for
// lost. The lowest rank that answers leads (and hands the lead to a lower rank that answers later):
// it takes the others' registrations until every member of the last group has registered or
// stayed silent for as long (within a window), then gives every one the same new group, or an
// error when the group would not be a quorum (more
// than half of the last one, or exactly half with its rank 0), so that the two sides of a cut
// network cannot both train on. The new group is ordered by each member's global step, highest
// first: its rank 0 is a member that applied the last step if any did, and the others take its
// state when the run resumes (what CollectiveEngine does at the start of every run), so a step that
// reached some survivors and not others is neither lost nor applied twice. Every message carries
// the run's identity and the group's generation. Plain C++ over ZeroMQ.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../cluster/cluster.hpp"
#include "../../cluster/host_lookup.hpp"
#include "../../core/error.hpp"
#include "../detail/refuses_connections.hpp"
#include "../detail/zmq_poll.hpp"
#include "run_identity.hpp"
#include "run_key.hpp"

namespace convoy::comm::bootstrap {

struct RegroupOptions {
  /// How long a member of the last group may stay silent before it is taken for lost.
  std::chrono::milliseconds patience{1000};
  /// Members of the last group (by its ranks) known to have ended: the liveness board saw the
  /// connection each beat on close with no word (LivenessBoard::gone()). The leader waits
  /// `gone_patience` for them instead of `patience`: a survivor that is slow to notice the loss
  /// still beats, and one that noticed said it leaves to regroup. The last group's rank 0, the
  /// board's own process, is taken for ended when its address refuses connections, and waited
  /// for as long.
  std::vector<std::size_t> gone{};
  std::chrono::milliseconds gone_patience{100};
  /// How long the leader takes registrations at most: it closes sooner once every member of the
  /// last group has come or stayed silent for `patience`.
  std::chrono::milliseconds window{2000};
  /// Fewer members than this end the run, quorum or not.
  std::size_t min_workers = 1;
  /// Processes started again that asked to join (cluster worker ranks): the leader waits for
  /// them too, within the window, and takes them in after the members, up to max_workers.
  std::vector<std::size_t> newcomers{};
  /// More members than this: the newcomers past it are refused (0: no limit).
  std::size_t max_workers = 0;
  /// The run's identity (run_identity()); the generation is added to it.
  std::string run{};
  /// Where the leader says who was lost and who goes on; null: nowhere.
  std::ostream* log = &std::clog;
};

/// The group the survivors agreed on.
struct Group {
  /// Cluster worker ranks (Cluster::worker_address's numbering), in the group's rank order.
  std::vector<std::size_t> workers;
  /// This process's rank in it.
  std::size_t rank = 0;
  /// How many times the run's group has changed.
  std::uint64_t generation = 0;
  /// The processes of the group the run started with (0: this group's own), whose replicas the
  /// data's plan is made for: a worker that joins later plans as the first group did.
  std::size_t first_size = 0;

  std::size_t started_with() const { return first_size != 0 ? first_size : workers.size(); }
};

namespace detail {
inline constexpr std::string_view regroup_protocol = "convoy-regroup/1";
// The kinds of answer a regroup's server gives.
inline std::set<std::string, std::less<>> const regroup_answers{
    "searching", "wait", "lead", "follow", "group", "closed", "refused"};

inline std::string join(std::vector<std::size_t> const& ranks) {
  std::string text;
  for (auto r : ranks) {
    if (!text.empty()) text += ',';
    text += std::to_string(r);
  }
  return text;
}
inline std::optional<std::vector<std::size_t>> split(std::string_view text, std::size_t bound) {
  std::vector<std::size_t> out;
  while (!text.empty()) {
    auto const comma = text.find(',');
    auto const item = text.substr(0, comma);
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != item.npos)
      return std::nullopt;
    out.push_back(std::stoul(std::string(item)));
    if (out.back() >= bound) return std::nullopt;
    text = comma == text.npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}
inline std::optional<std::int64_t> number(std::string_view text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != text.npos)
    return std::nullopt;
  return std::stoll(std::string(text));
}

// A request [protocol, group identity, who, step] on a fresh REQ socket to `address`, returned.
inline zmq::socket_t send_request(zmq::context_t& context, std::string const& address,
                                  std::string_view identity, std::string_view who,
                                  std::string_view step, std::optional<RunKey> const& key) {
  zmq::socket_t socket(context, zmq::socket_type::req);
  socket.set(zmq::sockopt::linger, 0);
  // A rank that is about to serve (it noticed the loss a moment later) refuses the first try.
  socket.set(zmq::sockopt::reconnect_ivl, 20);
  socket.set(zmq::sockopt::maxmsgsize, std::int64_t{4096});
  connect_under(socket, key);
  socket.connect("tcp://" + address);
  socket.send(zmq::buffer(regroup_protocol), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(identity), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(who), zmq::send_flags::sndmore);
  socket.send(zmq::buffer(step), zmq::send_flags::none);
  return socket;
}
// The answer [kind, text] waiting on `socket`; nothing for another shape.
inline std::optional<std::pair<std::string, std::string>> read_answer(zmq::socket_t& socket) {
  std::vector<zmq::message_t> answer;
  if (!zmq::recv_multipart(socket, std::back_inserter(answer), zmq::recv_flags::dontwait) ||
      answer.size() != 2)
    return std::nullopt;
  return std::pair{answer[0].to_string(), answer[1].to_string()};
}
// The group of `workers` (cluster ranks, in order) of generation `generation`, with cluster rank
// `mine`'s place in it.
inline Group group_of(std::vector<std::size_t> workers, std::size_t mine,
                      std::uint64_t generation) {
  auto const rank =
      static_cast<std::size_t>(std::find(workers.begin(), workers.end(), mine) - workers.begin());
  return Group{.workers = std::move(workers), .rank = rank, .generation = generation};
}

// One survivor's side of the agreement (see the header's comment). Ranks are the last group's.
class Regroup {
 public:
  Regroup(Cluster const& cluster, Group const& last, std::int64_t step,
          RegroupOptions const& options)
      : cluster_(&cluster),
        last_(last),
        step_(step),
        options_(options),
        run_(group_identity(options.run, last.generation)),
        me_(last.rank),
        answer_(context_, zmq::socket_type::rep) {
    answer_.set(zmq::sockopt::linger, 0);
    answer_.set(zmq::sockopt::maxmsgsize, std::int64_t{4096});
    if (key_) {
      gate_.emplace(context_, *key_, name(me_) + "'s regroup", options_.log);
      serve_under(answer_, key_);
    }
    try {
      answer_.bind(zmq_bind_endpoint(address(me_), "this process's address"));
      serving_ = true;
    } catch (std::exception const& e) {  // another program holds it: this one can only follow
      if (options_.log) {
        *options_.log << "convoy: " << name(me_) << " cannot serve the regroup at its address ("
                      << e.what() << "); it can follow another process, not lead" << std::endl;
      }
    }
  }

  Group run(std::chrono::milliseconds timeout) {
    auto const deadline = std::chrono::steady_clock::now() + timeout;
    asking_anew();
    for (;;) {
      auto const now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        throw TimeoutError(
            "convoy: " + name(me_) + " could not regroup within " +
            std::to_string(timeout.count()) + " ms" +
            (following_ ? "; " + name(*following_) + " leads and never answered" : std::string()));
      }
      if (result_) return *result_;
      if (leading_) {
        if (now >= closes_ || settled(now)) return finish_leading(deadline);
        probe_missing(now);
        continue;
      }
      if (!following_ && candidate_ == me_) {
        lead();
        continue;
      }
      auto const asked = following_ ? *following_ : candidate_;
      auto answer = ask(asked);
      if (!answer) {  // silent: a lost process, or the leader lost meanwhile
        if (!silent_long_enough(asked)) continue;
        if (following_) {
          leader_lost();
        } else {
          ++candidate_;
        }
        asking_anew();
        continue;
      }
      asking_anew();
      take_answer(asked, *answer);
    }
  }

 private:
  // What `asked` answered, as this process goes on from it.
  void take_answer(std::size_t asked, std::pair<std::string, std::string> const& answer) {
    auto const& [kind, text] = answer;
    if (kind == "searching" || kind == "wait") {
      candidate_ = asked;
      following_.reset();
      pause();
    } else if (kind == "lead") {
      following_ = asked;
      pause();
    } else if (kind == "follow") {
      auto const leader = split(text, last_.workers.size());
      if (!leader || leader->size() != 1 || (*leader)[0] >= asked) {
        throw ProtocolError("convoy: " + name(asked) + " answered the regroup with '" + text + "'");
      }
      candidate_ = (*leader)[0];
      following_.reset();
    } else if (kind == "group") {
      take_group(text, asked);
    } else if (kind == "closed") {
      throw LeftBehind("convoy: " + name(me_) + " came too late: the group re-formed without it (" +
                       text + ")");
    } else {
      throw Error("convoy: " + name(asked) + " refused " + name(me_) + "'s regroup: " + text);
    }
  }

  // Whether `asked` (the lower rank this process searches at, or its leader), silent again, has
  // been silent for the patience; for one known to have ended, for gone_patience from when that was
  // first seen, so that a live rank 0 between its board and its regroup's socket (a moment) gets a
  // second chance.
  bool silent_long_enough(std::size_t asked) {
    auto const now = std::chrono::steady_clock::now();
    if (!following_ && ended(asked)) {
      if (!ended_since_) ended_since_ = now;
      return now - *ended_since_ >= gone_patience();
    }
    ended_since_.reset();
    return now - asking_since_ >= options_.patience;
  }
  // The rank this process asks changed, or answered: its silence is timed afresh.
  void asking_anew() {
    asking_since_ = std::chrono::steady_clock::now();
    ended_since_.reset();
  }

  // The leader this process registered with was lost too, before it answered: the search starts
  // again above it (every lower rank was silent to it, or handed it the lead), and the new leader
  // counts it among the lost. A lower rank that is still alive takes the lead from whoever leads
  // next, as when it notices late.
  void leader_lost() {
    if (options_.log) {
      *options_.log << "convoy: " << name(me_) << " registered to regroup with "
                    << name(*following_)
                    << ", which then stopped answering; it asks the ranks above it" << std::endl;
    }
    candidate_ = *following_ + 1;
    following_.reset();
  }

  // Whether member `rank` is known to have ended: the liveness board saw it (options.gone), or,
  // for the last group's rank 0, its address refuses connections. Its board (or, when its group
  // could not meet, its rendezvous) held that address until it left to regroup, and its regroup's
  // socket holds it a moment after, so a refusal there that lasts is the kernel's word that the
  // process is gone (a killed process's ports close with it). Any other
  // member binds its address only once it regroups: silence there says nothing before the
  // patience.
  bool ended(std::size_t rank) const {
    if (std::ranges::find(options_.gone, rank) != options_.gone.end()) return true;
    return rank == 0 &&
           comm::detail::refuses_connections(address(0), std::chrono::milliseconds(50));
  }
  std::chrono::milliseconds gone_patience() const {
    return std::min(options_.gone_patience, options_.patience);
  }

  // The leader's: every member of the last group has registered or been silent for `patience`
  // (the survivors notice a loss within moments of each other, and serve as soon as they do), or
  // for `gone_patience` where it is known to have ended.
  bool settled(std::chrono::steady_clock::time_point now) const {
    for (auto c : options_.newcomers)
      if (!joined_.contains(c)) return false;  // it knocked a moment ago: within the window
    for (std::size_t r = 0; r < last_.workers.size(); ++r) {
      if (r == me_ || steps_.contains(r)) continue;
      auto const wait = ended_.contains(r) ? gone_patience() : options_.patience;
      auto const silent = silent_since_.find(r);
      if (silent == silent_since_.end() || now - silent->second < wait) return false;
    }
    return true;
  }

  // The leader asks the next member that has not registered, serving meanwhile. A lower rank that
  // answers noticed the loss later than this one: it takes over (this process follows it, and
  // tells its own registrants so). A higher one that answers is alive and on its way.
  void probe_missing(std::chrono::steady_clock::time_point now) {
    std::vector<std::size_t> missing;
    for (std::size_t r = 0; r < last_.workers.size(); ++r)
      if (r != me_ && !steps_.contains(r)) missing.push_back(r);
    if (missing.empty()) return serve_for(std::chrono::milliseconds(20));
    auto const rank = missing[probe_++ % missing.size()];
    auto const answer = ask(rank);
    if (!answer) {
      // A member known to have ended is timed from the end of the silent ask that first showed it,
      // so that one taken for gone in error (still binding its socket) has a second chance.
      if (!ended(rank)) {
        ended_.erase(rank);
        silent_since_.try_emplace(rank, now);
      } else if (ended_.insert(rank).second) {
        silent_since_[rank] = std::chrono::steady_clock::now();
      }
      return;
    }
    silent_since_.erase(rank);
    if (rank > me_) return;
    stop_leading();
    take_answer(rank, *answer);
  }

  std::string const& address(std::size_t rank) const {
    return cluster_->worker_address(last_.workers.at(rank));
  }
  // "worker:1 at host:port" of cluster worker rank `c`, and of a list of them.
  std::string task_at(std::size_t c) const {
    return cluster_->worker_task(c) + " at " + cluster_->worker_address(c);
  }
  std::string list(std::vector<std::size_t> const& workers) const {
    std::string text;
    for (auto c : workers) {
      if (!text.empty()) text += ", ";
      text += task_at(c);
    }
    return text;
  }
  std::string name(std::size_t rank) const { return task_at(last_.workers.at(rank)); }
  void pause() { serve_for(std::chrono::milliseconds(50)); }

  // Asks `rank` once, on a fresh socket: its answer, or nothing after up to 100 ms (serving
  // meanwhile).
  std::optional<std::pair<std::string, std::string>> ask(std::size_t rank) {
    auto socket = send_request(context_, address(rank), run_, std::to_string(me_),
                               std::to_string(step_), key_);
    auto const until = std::chrono::steady_clock::now() +
                       std::min(options_.patience, std::chrono::milliseconds(100));
    while (std::chrono::steady_clock::now() < until) {
      zmq::pollitem_t items[2] = {
          {socket.handle(), 0, ZMQ_POLLIN, 0},
          {answer_.handle(), 0, serving_ ? short(ZMQ_POLLIN) : short(0), 0}};
      comm::detail::poll(items, 2, std::chrono::milliseconds(20));
      if (items[1].revents & ZMQ_POLLIN) serve_one();
      // Anything but a regroup's answer is another server at that address (a group that
      // re-formed without this process, or another program): that rank is not regrouping. It
      // counts as silence, so this ask still takes its time (serving), not a new connection
      // at once.
      if (items[0].revents & ZMQ_POLLIN) {
        auto answer = read_answer(socket);
        if (answer && regroup_answers.contains(answer->first)) return answer;
        serve_for(std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now()));
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  void serve_for(std::chrono::milliseconds span) {
    auto const until = std::chrono::steady_clock::now() + span;
    while (std::chrono::steady_clock::now() < until) {
      if (!serving_) {
        std::this_thread::sleep_for(span);
        return;
      }
      zmq::pollitem_t item{answer_.handle(), 0, ZMQ_POLLIN, 0};
      comm::detail::poll(&item, 1, std::chrono::milliseconds(10));
      if (item.revents & ZMQ_POLLIN) serve_one();
    }
  }

  void reply(std::string_view kind, std::string_view text) {
    answer_.send(zmq::buffer(kind), zmq::send_flags::sndmore);
    answer_.send(zmq::buffer(text), zmq::send_flags::none);
  }

  // One request on this process's socket, answered as this process stands.
  void serve_one() {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(answer_, std::back_inserter(request), zmq::recv_flags::dontwait))
      return;
    // Another protocol (a rendezvous of the group being formed, before this socket closes): later.
    if (request.size() != 4 || request[0].to_string_view() != regroup_protocol)
      return reply("wait", "");
    auto const theirs = request[1].to_string_view();
    if (theirs != run_) {
      bool const same_run = run_of(theirs) == options_.run;
      // A later group's member: this process is the one behind (its group re-formed without it),
      // and to the asker it is silent, not a refusal.
      auto const their_generation = generation_of(theirs);
      if (same_run && their_generation && *their_generation > last_.generation)
        return reply("behind", "");
      return reply(same_run ? "closed" : "refused",
                   same_run ? "another generation of the group" : "another run");
    }
    if (request[2].to_string_view().starts_with("+")) return newcomer(request);
    auto const rank = split(request[2].to_string_view(), last_.workers.size());
    auto const step = number(request[3].to_string_view());
    if (!rank || rank->size() != 1 || (*rank)[0] == me_ || !step)
      return reply("refused", "a malformed regroup request");
    auto const them = (*rank)[0];
    if (leading_ && !closed_) {
      if (them < me_) return hand_over(them);
      steps_[them] = *step;
      return reply("lead", "");
    }
    if (leading_) {
      if (!steps_.contains(them)) return reply("closed", "it re-formed as " + agreed_text());
      answered_.insert(them);
      if (!refusal_.empty()) return reply("refused", refusal_);
      return reply("group", join(agreed_));
    }
    if (following_) return reply("follow", std::to_string(*following_));
    return reply("searching", "");
  }

  // A lower rank asks only as a leader asks the members it misses (a searcher asks lower ranks, a
  // follower its leader): it noticed the loss later than this process, which leads meanwhile, and
  // takes the lead over. This process follows it, and tells its own registrants so.
  void hand_over(std::size_t lower) {
    stop_leading();
    following_ = lower;
    reply("follow", std::to_string(lower));
  }
  // A leader that hands the lead to a lower rank forgets what it held as the leader.
  void stop_leading() {
    leading_ = false;
    steps_.clear();
    silent_since_.clear();
    ended_.clear();
    asking_anew();
  }

  // A process started again, registering as "+<cluster rank>": the leader takes it in while open.
  void newcomer(std::vector<zmq::message_t> const& request) {
    auto const rank = split(request[2].to_string_view().substr(1), cluster_->worker_count());
    if (!rank || rank->size() != 1) return reply("refused", "a malformed request to join");
    auto const c = (*rank)[0];
    if (c == last_.workers.at(me_)) return reply("refused", "a request to join as the leader");
    if (!leading_) return reply(following_ ? "follow" : "searching", "");
    if (!closed_) {
      // A member lost and started again while the survivors regroup (it knocked at the old
      // board) comes back as that member, behind every other.
      auto const member = std::find(last_.workers.begin(), last_.workers.end(), c);
      if (member != last_.workers.end()) {
        steps_[static_cast<std::size_t>(member - last_.workers.begin())] = -1;
      } else {
        joined_.insert(c);
      }
      return reply("lead", "");
    }
    if (std::find(agreed_.begin(), agreed_.end(), c) == agreed_.end())
      return reply("closed", "it re-formed as " + agreed_text());
    newcomers_answered_.insert(c);
    if (!refusal_.empty()) return reply("refused", refusal_);
    // A newcomer learns the size of the group the run started with, which the members know.
    return reply("group", join(agreed_) + ";" + std::to_string(last_.started_with()));
  }

  void lead() {
    leading_ = true;
    closes_ = std::chrono::steady_clock::now() + options_.window;
    steps_[me_] = step_;
    if (!serving_) {
      throw Error("convoy: " + name(me_) + " would lead the regroup (no lower rank answered) but " +
                  "cannot serve at its address");
    }
  }

  std::string agreed_text() const { return list(agreed_); }

  // Why `m` members of the last group's `n` (lost: `lost_text`) may not go on.
  std::string refusal(std::string const& lost_text, std::size_t n, std::size_t m,
                      bool quorum) const {
    std::string text =
        "the group of " + std::to_string(n) + " lost " + lost_text + ": " + std::to_string(m) +
        " of " + std::to_string(n) + " remain, " +
        (!quorum ? "not more than half, nor half with the group's rank 0 (" + name(0) +
                       "); they may be one side of a cut network whose other side "
                       "trains on"
                 : "fewer than min_workers " + std::to_string(options_.min_workers));
    // Alone, this process may be the one that was lost to the others: stopped or cut off past
    // their timeout, it comes back to find they went on without it.
    if (m == 1 && n > 1) {
      text +=
          " (or this process was stopped or cut off past the exchange's timeout, and "
          "the others went on without it)";
    }
    return text;
  }

  Group finish_leading(std::chrono::steady_clock::time_point deadline) {
    closed_ = true;
    std::vector<std::size_t> order;  // the members, by last rank, furthest on first
    for (auto const& [rank, step] : steps_) order.push_back(rank);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return steps_[a] > steps_[b]; });
    std::vector<std::size_t> lost;  // by cluster rank
    for (std::size_t r = 0; r < last_.workers.size(); ++r)
      if (!steps_.contains(r)) lost.push_back(last_.workers[r]);
    auto const lost_text = list(lost);
    auto const n = last_.workers.size(), m = order.size();
    bool const quorum = 2 * m > n || (2 * m == n && steps_.contains(0));
    for (auto r : order) agreed_.push_back(last_.workers.at(r));
    std::vector<std::size_t> taken_in;
    for (auto c : joined_) {
      if (options_.max_workers != 0 && agreed_.size() >= options_.max_workers) break;
      agreed_.push_back(c);
      taken_in.push_back(c);
    }
    if (!quorum || m < options_.min_workers) {
      refusal_ = refusal(lost_text, n, m, quorum);
    } else if (options_.log) {
      std::string change;
      if (!lost.empty()) change = "lost " + lost_text;
      if (!taken_in.empty()) {
        if (!change.empty()) change += "; ";
        change += "takes in " + list(taken_in);
      }
      if (change.empty()) change = "re-formed with every member";
      *options_.log << "convoy: the group of " << n << " " << change << "; " << agreed_.size()
                    << " go on (" << agreed_text() << "), from global step "
                    << steps_[order.front()] << std::endl;
    }
    // Every member fetches its answer; a member whose answer was lost asks again meanwhile.
    auto const linger =
        std::min(deadline, std::chrono::steady_clock::now() + 2 * options_.patience);
    while (std::chrono::steady_clock::now() < linger &&
           answered_.size() + 1 + newcomers_answered_.size() < agreed_.size())
      serve_for(std::chrono::milliseconds(20));
    if (!refusal_.empty()) {
      if (m == 1 && n > 1 && !quorum) throw LeftBehind("convoy: " + refusal_ + "; the run stops");
      throw Error("convoy: " + refusal_ + "; the run stops");
    }
    auto group = group_of(agreed_, last_.workers.at(me_), last_.generation + 1);
    group.first_size = last_.started_with();
    return group;
  }

  void take_group(std::string const& text, std::size_t from) {
    auto const workers = split(text, cluster_->worker_count());
    auto const mine = last_.workers.at(me_);
    if (!workers || std::find(workers->begin(), workers->end(), mine) == workers->end()) {
      throw ProtocolError("convoy: " + name(from) + " answered the regroup with group '" + text +
                          "', which does not hold " + name(me_));
    }
    result_ = group_of(*workers, mine, last_.generation + 1);
    result_->first_size = last_.started_with();
  }

  Cluster const* cluster_;
  Group last_;
  std::int64_t step_;
  RegroupOptions options_;
  std::string run_;
  std::size_t me_;
  std::optional<RunKey> key_ = run_key();  // read once, for the gate and every request
  zmq::context_t context_;
  std::optional<KeyGate> gate_;  // under the run's key: checks the peers' keys, closed after them
  zmq::socket_t answer_;
  bool serving_ = false;
  std::optional<std::size_t> following_;  // the leader this process registered with
  std::optional<Group> result_;
  bool leading_ = false, closed_ = false;
  std::size_t candidate_ = 0;                           // the lower rank asked next
  std::chrono::steady_clock::time_point asking_since_;  // silent_long_enough()
  std::optional<std::chrono::steady_clock::time_point> ended_since_;
  std::size_t probe_ = 0;  // a leader's: the members asked so far
  std::map<std::size_t, std::chrono::steady_clock::time_point> silent_since_;  // the leader's
  std::set<std::size_t> ended_;  // the leader's: silent members known to have ended (ended())
  std::chrono::steady_clock::time_point closes_;  // the leader's window
  std::map<std::size_t, std::int64_t> steps_;     // the leader's: each member's global step
  std::vector<std::size_t> agreed_;               // the leader's: the new group, by cluster rank
  std::set<std::size_t> joined_;  // the leader's: newcomers registered (cluster ranks)
  std::set<std::size_t> newcomers_answered_;
  std::set<std::size_t> answered_;
  std::string refusal_;
};
}  // namespace detail

/// A process started again joins the group whose rank 0 at `leader` answered its knock with the
/// group's identity `group_run` (group_identity()): it
/// registers as cluster worker rank `rank` until the group, having finished its step, regroups
/// and takes it in. Blocks up to `timeout`. Returns the new group and its place in it; throws Error
/// when the group re-formed without it or refused it, TimeoutError after `timeout`.
inline Group join_group(Cluster const& cluster, std::size_t rank, std::string const& leader,
                        std::string const& group_run, std::chrono::milliseconds timeout) {
  auto const generation = generation_of(group_run);
  if (!generation) {
    throw ProtocolError("convoy: the group at " + leader + " gave a malformed identity to join");
  }
  std::string const me = "+" + std::to_string(rank);
  auto const key = run_key();
  zmq::context_t context;
  auto const deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto socket = detail::send_request(context, leader, group_run, me, "0", key);
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    comm::detail::poll(&item, 1, std::chrono::milliseconds(100));
    // None: the board still holds the address; the group has not begun to regroup.
    auto const answer =
        (item.revents & ZMQ_POLLIN) != 0 ? detail::read_answer(socket) : std::nullopt;
    if (!answer) continue;
    auto const& [kind, text] = *answer;
    if (kind == "group") {
      // "<workers>;<the first group's size>"
      auto const sizes = text.find(';');
      auto const first = detail::number(sizes == text.npos ? "" : text.substr(sizes + 1));
      auto const workers = detail::split(text.substr(0, sizes), cluster.worker_count());
      if (!workers || std::find(workers->begin(), workers->end(), rank) == workers->end()) {
        throw ProtocolError("convoy: " + cluster.worker_task(rank) + " asked to join at " + leader +
                            " and got the group '" + text + "', which does not hold it");
      }
      auto group = detail::group_of(*workers, rank, *generation + 1);
      group.first_size = first && *first > 0 ? static_cast<std::size_t>(*first) : 0;
      return group;
    }
    if (kind == "closed" || kind == "refused") {
      throw Error("convoy: " + cluster.worker_task(rank) + " asked to join the group at " + leader +
                  " and was refused: " + text);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // "lead": taken; wait
  }
  throw TimeoutError("convoy: " + cluster.worker_task(rank) + " asked to join the group at " +
                     leader + " but was not taken in within " + std::to_string(timeout.count()) +
                     " ms");
}

/// Called by every survivor of `last` (this process is last.rank) once its collective failed, with
/// its global `step`: blocks until the survivors agree on a new group (within `timeout`) and
/// returns it, this process's rank in it and the next generation. Throws Error when the survivors
/// are not a quorum of `last` or fewer than options.min_workers (naming who was lost, a leader lost
/// during the agreement included: its followers then agree without it); LeftBehind (an Error) when
/// this process came after the group re-formed without it or found no other member; TimeoutError
/// after `timeout`.
inline Group regroup(Cluster const& cluster, Group const& last, std::int64_t step,
                     RegroupOptions const& options, std::chrono::milliseconds timeout) {
  detail::Regroup agreement(cluster, last, step, options);
  return agreement.run(timeout);
}

}  // namespace convoy::comm::bootstrap
