// ProcessGroup: the processes of one collective run, set up once for every fabric (Gloo's, NCCL's,
// the next one): the cluster, the group of its workers that trains now (all of them, until the
// survivors of a loss regroup: regroup.hpp) and this process's rank in it, the numbering of the
// run's replicas, and the liveness board and reporter that name a process that stops answering. A
// fabric keeps only what is its own: its rendezvous payload, its connections, its allreduce.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../cluster/cluster.hpp"
#include "../../cluster/resolve.hpp"
#include "../../core/error.hpp"
#include "liveness.hpp"
#include "regroup.hpp"
#include "run_identity.hpp"
#include "run_key.hpp"

namespace convoy::comm::bootstrap {

/// This process holds `local_replicas` of the run's replicas, the run's replicas
/// first_replica() ... first_replica() + local_replicas - 1; every process holds as many.
class ProcessGroup {
 public:
  /// `cluster`, or the one the environment describes (every rank of a rank launcher a worker
  /// unless CONVOY_PS_TASKS says otherwise). Throws ClusterError for a task that takes no part in
  /// a collective (a ps or evaluator task), naming `fabric` ("comm::Gloo").
  ///
  /// `members`: the group that trains, from a regroup; empty: every worker of the cluster.
  ProcessGroup(std::optional<Cluster> const& cluster, std::size_t local_replicas,
               std::string_view fabric, std::optional<Group> members = {})
      : cluster_(cluster ? *cluster : Cluster::from_environment(RankJobs::all_workers)),
        local_(local_replicas) {
    if (!cluster_.single_process() && cluster_.worker_rank() < 0) {
      throw ClusterError("convoy: task " + cluster_.job + ":" + std::to_string(cluster_.index) +
                         " takes no part in " + std::string(fabric) +
                         "'s collective; only the chief and the workers do (a cluster for it has "
                         "no ps tasks: under a launcher that only numbers its processes, leave "
                         "CONVOY_PS_TASKS unset or 0)");
    }
    if (members) {
      members_ = std::move(*members);
    } else {
      for (std::size_t w = 0; w < cluster_.worker_count(); ++w) members_.workers.push_back(w);
      members_.rank = cluster_.single_process() ? 0 : std::size_t(cluster_.worker_rank());
    }
    run_ = group_identity(run_identity(cluster_), members_.generation);
    bootstrap_mode_ = run_key_mode(run_key());  // a bad key file is named here, before any socket
  }
  ProcessGroup(ProcessGroup const&) = delete;
  ProcessGroup& operator=(ProcessGroup const&) = delete;
  ~ProcessGroup() { stop_liveness(); }

  Cluster const& cluster() const { return cluster_; }
  /// The processes of the run, and this one's rank among them (its rank among the workers).
  std::size_t processes() const { return members_.workers.size(); }
  std::size_t process() const { return members_.rank; }
  /// The run's replicas, and the number of this process's first.
  std::size_t world_size() const { return processes() * local_; }
  std::size_t first_replica() const { return process() * local_; }
  /// The replicas of the group the run started with: those the data's plan is made for.
  std::size_t first_world_size() const { return members_.started_with() * local_; }
  /// The group that trains: cluster worker ranks by process rank, this one's, the generation.
  Group const& members() const { return members_; }
  /// Process `p`'s address in the cluster, and "worker:1" of it, for messages.
  std::string const& address(std::size_t p) const {
    return cluster_.worker_address(members_.workers.at(p));
  }
  std::string task(std::size_t p) const { return cluster_.worker_task(members_.workers.at(p)); }
  std::string task() const { return task(process()); }
  /// Every process's address in the cluster, by rank: where the group meets.
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (std::size_t p = 0; p < processes(); ++p) out.push_back(address(p));
    return out;
  }
  /// The first process's address in the cluster: its rendezvous, then its liveness board.
  std::string const& coordinator() const { return address(0); }
  /// The identity of the run and of the group's generation, in every bootstrap message.
  std::string const& run() const { return run_; }
  /// How the bootstrap talks, for the first log line: "plaintext", or "CURVE under
  /// CONVOY_BOOTSTRAP_KEY" (run_key.hpp).
  std::string const& bootstrap_mode() const { return bootstrap_mode_; }

  /// Starts the liveness board (on the first process) and this process's reporter, which beats
  /// with `issued()`, the collectives this process has issued; call it once the rendezvous has
  /// given up the coordinator's address. Every process is named by its task and address. Nothing
  /// for a single process, unless `even_alone` (a group that shrank to one process keeps its
  /// board, where processes that come back knock). The board only names who stopped answering:
  /// when its address cannot be bound (another program took the port between the rendezvous and
  /// the board), the first process says so on `warnings` and the run goes on, its failures named
  /// by their connections' errors alone.
  void start_liveness(std::function<std::int64_t()> issued, LivenessOptions options = {},
                      std::ostream* warnings = &std::clog, bool even_alone = false) {
    if (processes() == 1 && !even_alone) return;
    options.names.clear();
    if (options.run.empty()) options.run = run_;
    for (std::size_t p = 0; p < processes(); ++p)
      options.names.push_back(task(p) + " at " + address(p));
    stale_ = options.interval * options.missed_beats;
    if (process() == 0) {
      try {
        board_ = std::make_unique<LivenessBoard>(coordinator(), int(processes()), 0, options.run);
      } catch (Error const& e) {
        if (warnings) {
          *warnings << e.what() << "; " << task()
                    << " trains on without it: a process that stops answering is named by the "
                       "error of its connection alone, not by who stopped beating"
                    << std::endl;
        }
        return;  // no board to beat to: another program holds its address
      }
    }
    reporter_ = std::make_unique<LivenessReporter>(coordinator(), static_cast<int>(process()),
                                                   std::move(issued), std::move(options));
  }
  /// After a collective timed out: which processes stopped answering, as the board sees them
  /// (empty for a single process).
  std::string explain_timeout() const {
    return reporter_ && processes() > 1 ? reporter_->explain() : std::string();
  }
  /// After a connection failed: the same, waiting up to `patience` for the board to see a killed
  /// process, which still looks alive for a moment.
  std::string explain_failure(std::chrono::milliseconds patience) const {
    return reporter_ && processes() > 1 ? reporter_->explain_after_failure(patience)
                                        : std::string();
  }
  /// Stops beating and tells the board this process ended on its own: before whatever `issued`
  /// reads goes away.
  void stop_liveness() {
    if (reporter_) reporter_->say_goodbye();
    reporter_.reset();
  }
  /// After a failure the other processes may still ask the board who died: on the first process
  /// it stays until every process's beat is stale, up to `at_most`.
  void linger_board(std::chrono::milliseconds at_most) {
    if (board_) board_->linger(stale_, at_most);
  }
  /// On the group's rank 0: whether a process started again has asked to join (cheap), and the
  /// cluster ranks of those that have.
  bool has_joiners() const { return board_ && board_->has_joiners(); }
  std::vector<std::size_t> joiners() const {
    return board_ ? board_->joiners() : std::vector<std::size_t>{};
  }
  /// On the group's rank 0: the processes that have ended as the board sees them (killed: the
  /// connection they beat on closed without a word), by their rank in the group.
  std::vector<std::size_t> gone() const {
    return board_ ? board_->gone() : std::vector<std::size_t>{};
  }
  /// Stops beating, telling the board this process regroups (not a goodbye: it goes on), and
  /// closes the board at once, giving up the coordinator's address: before the survivors regroup,
  /// when every process serves at its own.
  void close_liveness() {
    if (reporter_) reporter_->leave_to_regroup();
    reporter_.reset();
    board_.reset();
  }

 private:
  Cluster cluster_;
  Group members_;
  std::string run_;
  std::string bootstrap_mode_;  // run_key_mode(), read when the group is made
  std::size_t local_ = 1;       // replicas a process
  std::chrono::milliseconds stale_{3000};
  std::unique_ptr<LivenessBoard> board_;        // the first process only
  std::unique_ptr<LivenessReporter> reporter_;  // stopped before the fabric's counts go
};

}  // namespace convoy::comm::bootstrap
