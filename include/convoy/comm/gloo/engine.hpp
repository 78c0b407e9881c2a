// comm::Gloo's engine: the collective engine (comm/buckets/collective_engine.hpp) over a fabric of
// this process's replica threads (summed in shared memory by HostExchange) and one Gloo allreduce
// per bucket across the processes. Building it resolves the cluster, meets the other processes
// through worker 0's rendezvous, connects Gloo's TCP pairs and starts the liveness board that
// names a process that stops answering. Needs convoy::gloo (libgloo-dev).
#pragma once

#include <gloo/common/error.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../cluster/address.hpp"
#include "../../cluster/cluster.hpp"
#include "../../core/error.hpp"
#include "../../place/gpu.hpp"
#include "../../place/host.hpp"
#include "../../place/mirrored.hpp"
#include "../bootstrap/liveness.hpp"
#include "../bootstrap/process_group.hpp"
#include "../bootstrap/regroup.hpp"
#include "../bootstrap/rendezvous.hpp"
#include "../bootstrap/start.hpp"
#include "../buckets/bucket_plan.hpp"
#include "../buckets/collective_engine.hpp"
#include "../gloo.hpp"
#include "allreducer.hpp"
#include "gloo_message.hpp"
#include "host_exchange.hpp"
#include "mesh.hpp"

namespace convoy::comm::gloo_fabric {

namespace detail {
// Blocks SIGPIPE in the calling thread while it lives, and so in every thread started meanwhile:
// Gloo's TCP transport writes without MSG_NOSIGNAL from the thread that calls it and from its own
// event loop, and a write to a peer that just died would kill the whole process (seen: exit status
// 141 in one of twenty kills) instead of failing the allreduce with an error naming the peer.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  // A SIGPIPE raised meanwhile is taken off this thread first: unblocked, it would still kill.
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1 && sigismember(&previous_, SIGPIPE) != 1) {
      timespec const now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(SigpipeBlocked const&) = delete;
  SigpipeBlocked& operator=(SigpipeBlocked const&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
};
}  // namespace detail

/// The collective fabric of comm::Gloo: this process holds `n` replica threads, the run's
/// replicas process_rank * n ... process_rank * n + n - 1; every process of the run must hold
/// the same number.
class HostFabric {
 public:
  /// The exchanges sum the spans they are handed on the host: a replica on a device hands them
  /// page-locked copies (comm/buckets/host_staged_exchange.hpp).
  static constexpr bool reads_host_memory = true;

  /// Blocks until every process has met and connected (within the policy's bootstrap_timeout).
  /// Throws ClusterError for a ps or evaluator task, Error for a plaintext listen address off
  /// loopback without allow_plaintext, TimeoutError naming the processes that never came.
  ///
  /// `members`: the group that trains, after a regroup; empty: every worker of the cluster.
  /// `meeting`: how long its processes wait for each other to meet (zero: bootstrap_timeout).
  template <class Group>
  HostFabric(Gloo const& policy, Group& group, BucketPlan const& plan,
             std::optional<bootstrap::Group> members = {},
             std::chrono::milliseconds meeting = std::chrono::milliseconds(0))
      : policy_(policy),
        group_(policy.cluster, group.size(), "comm::Gloo",
               members ? std::move(members) : joined(policy)),
        timeout_(policy.timeout) {
    for (auto const& b : plan.buckets()) largest_bucket_ = std::max(largest_bucket_, b.size);
    if (group_.processes() == 1) {
      // A group that shrank to one process of a larger cluster keeps a board at its address,
      // where a worker started again, or one left behind, knocks; the exchange, which has nothing
      // to sum with other processes, stops at a step boundary to take it in.
      bool const may_grow = !group_.cluster().single_process() &&
                            group_.cluster().worker_count() > 1 && !policy.fail_fast;
      HostExchange::Allreduce at_boundary;
      if (may_grow) {
        at_boundary = [this](std::size_t bucket, std::span<float>) { take_in_if_asked(bucket); };
      }
      exchange_ = std::make_unique<HostExchange>(group.size(), plan.size(), policy.timeout,
                                                 std::move(at_boundary));
      if (may_grow) start_liveness(/*even_alone=*/true);
      return;
    }
    Listen const listen = listen_address(policy);
    listen_ = listen.interface.empty() ? listen.host : listen.interface;
    // Gloo's event loop (started with the mesh) and the communication thread (with the exchange)
    // are born with SIGPIPE blocked.
    detail::SigpipeBlocked const no_sigpipe;
    context_ =
        connect_mesh(group_.addresses(), static_cast<int>(group_.process()), listen, policy.timeout,
                     bootstrap::Options{
                         .timeout = meeting.count() > 0 ? meeting : policy.bootstrap_timeout,
                         // A regrouped group's members start within moments of each other.
                         .retry = group_.members().generation > 0 ? std::chrono::milliseconds(50)
                                                                  : std::chrono::milliseconds(500),
                         .run = group_.run()},
                     policy.check_connection_ends);
    try {
      allreducer_ = std::make_unique<Allreducer>(context_, policy.algorithm, policy.timeout);
    } catch (::gloo::Exception const& e) {  // a peer lost as the processes first talk
      throw Error("convoy: " + group_.task() +
                  " lost its Gloo connections as they opened: " + without_source(e));
    }
    // A replica thread waits half as long again as an allreduce may take: a peer that stops
    // answering is then reported by the allreduce that waits for it (and the survivors regroup),
    // not by a replica's wait that cannot tell it from a slow replica of this process.
    exchange_ = std::make_unique<HostExchange>(
        group.size(), plan.size(), policy.timeout + policy.timeout / 2,
        [this](std::size_t bucket, std::span<float> values) { reduce(bucket, values); });
    start_liveness();
  }
  HostFabric(HostFabric const&) = delete;
  HostFabric& operator=(HostFabric const&) = delete;
  ~HostFabric() {
    // The communication thread first: inside a failed allreduce it asks the reporter who is
    // missing. The reporter's goodbye still reads the exchange's count.
    if (exchange_) exchange_->stop();
    group_.stop_liveness();
    // After a failure the others may still ask the board who died: it stays a moment.
    if (failed_) group_.linger_board(std::chrono::seconds(5));
    if (context_) close_connections();
  }

  HostExchange::Port& exchange(std::size_t replica) { return exchange_->port(replica); }
  std::size_t world_size() const { return group_.world_size(); }
  std::size_t first_replica() const { return group_.first_replica(); }
  /// The replicas of the group the run started with (a group that grew or shrank since plans its
  /// data as that one did).
  std::size_t first_world_size() const { return group_.first_world_size(); }
  std::string describe() const {
    if (group_.processes() == 1) {
      // Its board, where a worker started again knocks, is under the run's key when there is one.
      auto const mode = group_.bootstrap_mode();
      return "one process: its replica threads sum in shared memory" +
             (mode == "plaintext" ? std::string() : "; the bootstrap " + mode);
    }
    return "Gloo (" + allreducer_->describe(largest_bucket_ * sizeof(float)) + ") over TCP on " +
           listen_ + ", process " + std::to_string(group_.process()) + " of " +
           std::to_string(group_.processes()) +
           "; replica threads sum in shared memory first; the bootstrap " + group_.bootstrap_mode();
  }
  /// After an exchange failed: which processes stopped answering, as the liveness board sees
  /// them (empty for a single process).
  std::string explain_timeout() const { return group_.explain_timeout(); }

  /// The group that trains: cluster worker ranks by process rank.
  std::vector<std::size_t> const& members() const { return group_.members().workers; }
  /// True after an exchange failed because another process was lost (not this one's own doing),
  /// unless the policy is fail_fast: the survivors may regroup.
  bool may_regroup() const {
    return (peer_lost_.load() || taking_in_.load()) && !policy_.fail_fast;
  }
  /// Gives up this fabric's connections, board and address, agrees with the other survivors on
  /// the new group (bootstrap::regroup, at `step`, this process's global step) and connects it:
  /// the fabric to go on with. `step_time`: the last step's; `why`: the failure, for the log.
  /// Throws Error when the survivors are no quorum or fewer than min_workers, naming who was lost;
  /// this fabric is spent either way.
  template <class Group>
  std::unique_ptr<HostFabric> regroup(Group& group, BucketPlan const& plan, std::int64_t step,
                                      std::chrono::milliseconds step_time, std::string const& why) {
    if (taking_in_) {
      std::clog << "convoy: " << group_.task() << " regroups after global step " << step
                << " to take in a process started again" << std::endl;
    } else {
      std::clog << "convoy: " << group_.task() << " lost the group at global step " << step << " ("
                << why << "); regrouping" << std::endl;
    }
    exchange_->stop();
    auto options = regroup_options(step_time);  // the board's joiners and gone, before it goes
    group_.close_liveness();
    if (context_) close_connections();
    Gloo policy = policy_;
    policy.cluster = group_.cluster();
    // The members start to meet within the leader's answers of one another.
    auto const meeting = std::min(policy_.bootstrap_timeout, options.window + 4 * options.patience);
    bootstrap::Group last = group_.members();
    std::string unmet;  // why the last agreed group could not meet
    std::optional<bootstrap::Group> taken_in;  // by a group that went on without this process
    // Each failed meeting is a loss, and a quorum bounds those; so does this, whatever happens.
    for (std::size_t meetings = 0;; ++meetings) {
      if (meetings > group_.cluster().worker_count()) {
        throw Error("convoy: " + group_.task() + " regrouped " + std::to_string(meetings) +
                    " times without meeting; the last: " + unmet);
      }
      bool const joined = taken_in.has_value();
      auto next = joined ? *std::exchange(taken_in, std::nullopt) : agree(last, step, options);
      // Agreed again (not taken in by a group that went on: a later generation) by every member.
      bool const same_members = !joined && next.generation == last.generation + 1 &&
                                std::ranges::all_of(last.workers, [&](std::size_t w) {
                                  return std::ranges::find(next.workers, w) != next.workers.end();
                                });
      if (!unmet.empty() && same_members) {
        throw Error("convoy: " + group_.task() + "'s group of generation " +
                    std::to_string(last.generation) + " could not meet (" + unmet +
                    "), and every member of it is still there");
      }
      std::clog << "convoy: " << group_.task() << " trains on as process " << next.rank << " of "
                << next.workers.size() << " (the group's generation " << next.generation << ")"
                << std::endl;
      try {
        return std::make_unique<HostFabric>(policy, group, plan, next, meeting);
      } catch (ProtocolError const&) {
        throw;  // another run, or a peer that does not speak the protocol: no loss
      } catch (bootstrap::LeftBehind const& e) {
        // Stopped before this meeting, past the others' patience: they agreed again without this
        // process and meet as a later generation. A group that trains takes it in as one started
        // again; none within 3 s: the error stands.
        unmet = e.what();
        std::clog << "convoy: " << group_.task() << " was left behind (" << unmet << ")"
                  << std::endl;
        // A failure to join (the group refused it, or finished) ends the regroup, as in agree().
        taken_in =
            knock_and_join(group_.cluster(), next.workers.at(next.rank), "left behind by the group",
                           std::chrono::seconds(3), policy_.bootstrap_timeout);
        if (!taken_in) throw;
      } catch (Error const& e) {
        // A member lost after the agreement, before the group met (the new rank 0's rendezvous,
        // Gloo's pairs): the others agree again, on this group, and go on without it.
        unmet = e.what();
        std::clog << "convoy: " << group_.task() << " could not meet the group of generation "
                  << next.generation << " (" << unmet << "); regrouping again" << std::endl;
        last = std::move(next);
        options.newcomers.clear();
        options.gone.clear();
      }
    }
  }
  /// Stops this process's exchange; the other processes' next allreduce fails. The connections
  /// close once no allreduce of this process is in progress: Gloo's closeConnections() does not
  /// wake one already waiting for a peer's bytes, which would then wait out the whole timeout,
  /// whereas the peer, if alive, sends them and fails at its next allreduce.
  void abort(std::string const& why) {
    failed_ = true;
    stopped_ = true;
    exchange_->abort(why, [this] {
      if (context_) close_connections();
    });
  }

 private:
  // A worker started again (CONVOY_RESTART above 0) knocks for up to 10 s: long enough for a
  // group that is regrouping after this worker's loss to have its board up. When none answers
  // (every task was started again), the run meets afresh: every worker of the cluster, or with
  // start_workers those that are there (started()).
  static std::optional<bootstrap::Group> joined(Gloo const& policy) {
    Cluster const cluster =
        policy.cluster ? *policy.cluster : Cluster::from_environment(RankJobs::all_workers);
    if (cluster.single_process() || cluster.worker_rank() < 0) return std::nullopt;
    auto const me = static_cast<std::size_t>(cluster.worker_rank());
    if (char const* restart = std::getenv("CONVOY_RESTART"); restart && std::atoi(restart) > 0) {
      auto group = knock_and_join(cluster, me, "started again", std::chrono::seconds(10),
                                  policy.bootstrap_timeout);
      if (group) return group;
      std::clog << "convoy: " << cluster.worker_task(me)
                << " was started again, but no group answered: the run meets afresh"
                << bootstrap::run_key_hint(bootstrap::run_key()) << std::endl;
    }
    if (policy.start_workers == 0 || policy.start_workers >= cluster.worker_count()) {
      return std::nullopt;
    }
    check_start(policy);
    return started(cluster, me, policy);
  }

  // start_workers takes in the workers that come later as a regroup does: it needs regrouping, and
  // a first group that meets the floor and the cap.
  static void check_start(Gloo const& policy) {
    auto const n = std::to_string(policy.start_workers);
    if (policy.fail_fast) {
      throw Error(
          "convoy: Gloo::start_workers " + n +
          " takes the workers that come later in as a "
          "regroup does, which fail_fast turns off; leave fail_fast false, or start_workers "
          "0 to wait for every worker");
    }
    if (policy.start_workers < policy.min_workers) {
      throw Error("convoy: Gloo::start_workers " + n + " is below min_workers " +
                  std::to_string(policy.min_workers) + ": the first group could not train");
    }
    if (policy.max_workers != 0 && policy.start_workers > policy.max_workers) {
      throw Error("convoy: Gloo::start_workers " + n + " is above max_workers " +
                  std::to_string(policy.max_workers));
    }
  }

  // The group this worker starts in, with the workers that are there (Gloo::start_workers): worker
  // 0 serves the meeting; another asks it, and when the run started without it, knocks and joins
  // the group at a step boundary. It asks and knocks in turn (worker 0 may not serve yet, or be
  // past its meeting), each within a few seconds, until bootstrap_timeout.
  static bootstrap::Group started(Cluster const& cluster, std::size_t me, Gloo const& policy) {
    bootstrap::StartOptions options{
        .start_workers = policy.start_workers,
        .meeting = {.timeout = policy.bootstrap_timeout, .run = bootstrap::run_identity(cluster)}};
    auto const& coordinator = cluster.worker_address(0);
    if (me == 0) {
      auto group = bootstrap::serve_start(coordinator, cluster.worker_count(), options);
      std::clog << "convoy: " << cluster.worker_task(0) << " starts the run with "
                << group.workers.size() << " of " << cluster.worker_count()
                << " workers; the others join as they come" << std::endl;
      return group;
    }
    auto const deadline = std::chrono::steady_clock::now() + policy.bootstrap_timeout;
    for (;;) {
      auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      try {
        auto asking = options;
        asking.meeting.timeout = std::min(left, std::chrono::milliseconds(1000));
        return bootstrap::ask_start(coordinator, me, cluster.worker_count(), asking);
      } catch (bootstrap::StartedWithout const&) {
        // Worker 0 has moved on: the group's board, soon up at its address, takes the knock.
      } catch (bootstrap::StillWaiting const&) {
        continue;  // worker 0 is there and its meeting open (the last call): ask again at once
      } catch (TimeoutError const&) {
        // Worker 0 not there yet, or training: its board does not speak the meeting's protocol.
      }
      auto group = knock_and_join(cluster, me, "started after the run", std::chrono::seconds(3),
                                  policy.bootstrap_timeout);
      if (group) return std::move(*group);
    }
    throw TimeoutError(
        "convoy: " + cluster.worker_task(me) + " found neither worker 0's start at " + coordinator +
        " nor a group that trains within " + std::to_string(policy.bootstrap_timeout.count()) +
        " ms; is worker 0 running, and is its address reachable from here?" +
        bootstrap::run_key_hint(bootstrap::run_key()));
  }

  // Asks each other worker's address for the group's board in turn (300 ms each), for up to
  // `knocking` (within `timeout`); the group whose board answers takes cluster worker `me` in at
  // its next step boundary (bootstrap::join_group, within `timeout`). Nothing when none answers.
  static std::optional<bootstrap::Group> knock_and_join(Cluster const& cluster, std::size_t me,
                                                        std::string_view why,
                                                        std::chrono::milliseconds knocking,
                                                        std::chrono::milliseconds timeout) {
    auto const run = bootstrap::run_identity(cluster);
    auto const until = std::chrono::steady_clock::now() + std::min(timeout, knocking);
    while (std::chrono::steady_clock::now() < until) {
      for (std::size_t w = 0; w < cluster.worker_count(); ++w) {
        if (w == me) continue;
        auto const& address = cluster.worker_address(w);
        auto const group_run = bootstrap::knock(address, run, me, std::chrono::milliseconds(300));
        if (!group_run) continue;
        std::clog << "convoy: " << cluster.worker_task(me) << " (" << why
                  << ") asks the group to take it in, at " << address << std::endl;
        auto group = bootstrap::join_group(cluster, me, address, *group_run, timeout);
        std::clog << "convoy: " << cluster.worker_task(me) << " joins as process " << group.rank
                  << " of " << group.workers.size() << " (the group's generation "
                  << group.generation << ")" << std::endl;
        return group;
      }
    }
    return std::nullopt;
  }

  // The agreement's options: the window and the patience for a silent lower rank follow the step's
  // time (the survivors notice a loss within about a step of one another: the first to notice
  // closes its connections, which fails the others' next allreduce at once); the processes that
  // asked the board to join, and the members it saw end.
  bootstrap::RegroupOptions regroup_options(std::chrono::milliseconds step_time) const {
    bootstrap::RegroupOptions options;
    options.window = std::chrono::milliseconds(2000) + 2 * step_time;
    options.patience = std::chrono::milliseconds(500) + step_time;
    options.min_workers = policy_.min_workers;
    options.newcomers = group_.joiners();
    options.gone = group_.gone();
    options.max_workers = policy_.max_workers;
    options.run = bootstrap::run_identity(group_.cluster());
    return options;
  }

  // The group this process (last.rank) agrees on with the other members of `last`. When the others
  // went on without it (stopped, or cut off, past their timeout, or it came too late), a group that
  // still trains takes it in as one started again, at its next step boundary, and it heals from a
  // live peer; none within 3 s: the error stands.
  bootstrap::Group agree(bootstrap::Group const& last, std::int64_t step,
                         bootstrap::RegroupOptions const& options) const {
    try {
      return bootstrap::regroup(group_.cluster(), last, step, options, policy_.bootstrap_timeout);
    } catch (bootstrap::LeftBehind const&) {
      auto const me = last.workers.at(last.rank);
      auto joined = knock_and_join(group_.cluster(), me, "left behind by the group",
                                   std::chrono::seconds(3), policy_.bootstrap_timeout);
      if (!joined) throw;
      return std::move(*joined);
    }
  }

  // Where Gloo's TCP connections listen: the policy's host or interface, else this task's host in
  // the cluster. Throws Error for an address off loopback without allow_plaintext.
  Listen listen_address(Gloo const& policy) const {
    Listen listen{.host = policy.host, .interface = policy.interface};
    if (listen.host.empty() && listen.interface.empty()) {
      listen.host =
          parse_address(group_.cluster().worker_address(group_.process()), "comm::Gloo").host;
    }
    if (!policy.allow_plaintext && (!listen.interface.empty() || !is_loopback(listen.host))) {
      throw Error("convoy: comm::Gloo would listen on " +
                  (listen.interface.empty() ? listen.host : "interface " + listen.interface) +
                  ", off loopback, and Gloo's TCP is neither authenticated nor encrypted; set "
                  "Gloo::allow_plaintext on a trusted network (docs/operators.md)");
    }
    return listen;
  }

  // Beats four times a second, stale after a second: a lost peer is named within ~1 s.
  void start_liveness(bool even_alone = false) {
    group_.start_liveness(
        [this] { return exchange_->issued(); },
        bootstrap::LivenessOptions{.interval = std::chrono::milliseconds(250), .missed_beats = 4},
        &std::clog, even_alone);
  }

  // A process started again asked rank 0's board to join: the group stops at this step boundary
  // (this step not begun anywhere) and regroups with it.
  void take_in_if_asked(std::size_t bucket) {
    if (bucket == 0 && group_.has_joiners()) {
      taking_in_ = true;
      throw Error("convoy: " + group_.task() + " stops the group's step to take in a process " +
                  "started again");
    }
  }

  // One allreduce across the processes, in place. Gloo's errors become convoy's: a timeout as
  // TimeoutError, a lost connection as Error, each with what the liveness board says of who is
  // missing.
  void reduce(std::size_t bucket, std::span<float> values) {
    // A replica thread may run this (HostExchange lets a waiting replica reduce a ready bucket).
    detail::SigpipeBlocked const no_sigpipe;
    if (!policy_.fail_fast) take_in_if_asked(bucket);
    try {
      allreducer_->reduce(bucket, values);
    } catch (::gloo::Exception const& e) {
      failed_ = true;
      auto const what = without_source(e);
      // This process stopped it (abort()), whose error is the one the exchange reports: at once.
      if (stopped_) {
        throw Error("convoy: " + group_.task() + " stopped its Gloo allreduce (" + what + ")");
      }
      peer_lost_ = true;
      std::string message = "convoy: process " + std::to_string(group_.process()) + " (" +
                            group_.task() + ") lost the Gloo allreduce: ";
      // A timeout: the collective engine adds who stopped answering (explain_timeout()), once.
      if (what.find("timeout") != std::string::npos ||
          what.find("Timed out") != std::string::npos) {
        throw TimeoutError(message + "Timed out after " + std::to_string(timeout_.count()) +
                           " ms waiting for a peer (Gloo: " + what + ")");
      }
      message += what;
      // A peer's connection closed at once; a killed process still looks alive for a moment (the
      // survivors that regroup find out who is gone themselves).
      auto const why =
          policy_.fail_fast ? group_.explain_failure(std::chrono::seconds(3)) : std::string();
      if (!why.empty()) message += "; " + why;
      throw Error(message);
    }
  }

  // Gloo's message without its leading "[source file:line] ", its ports as listened on.
  static std::string without_source(::gloo::Exception const& e) {
    return readable_gloo_message(e.what());
  }

  void close_connections() {
    try {
      context_->closeConnections();
    } catch (...) {  // already closed, or the peer is gone: nothing to add
    }
  }

  Gloo policy_;
  bootstrap::ProcessGroup group_;
  std::size_t largest_bucket_ = 0;  // values
  std::chrono::milliseconds timeout_;
  std::string listen_;
  std::shared_ptr<::gloo::Context> context_;
  std::unique_ptr<Allreducer> allreducer_;  // registrations on context_'s pairs: after it
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopped_{false};        // abort(): an allreduce's error is this process's doing
  std::atomic<bool> peer_lost_{false};      // an allreduce failed on another process's account
  std::atomic<bool> taking_in_{false};      // this process stopped the step for a joiner
  std::unique_ptr<HostExchange> exchange_;  // calls reduce() on its thread; its count beats
};

template <class Model, class Placement, class Sync>
class Engine : public CollectiveEngine<Model, Placement, Sync, HostFabric> {
  static_assert(std::same_as<Placement, place::Host> || std::same_as<Placement, place::Mirrored> ||
                    std::same_as<Placement, place::Gpu>,
                "convoy: comm::Gloo sums on the host: place::Host (one replica per process), "
                "place::Mirrored (replica threads, summed in shared memory first) or place::Gpu "
                "(one GPU per process, its buckets through page-locked host memory)");

 public:
  using CollectiveEngine<Model, Placement, Sync, HostFabric>::CollectiveEngine;
};

}  // namespace convoy::comm::gloo_fabric
