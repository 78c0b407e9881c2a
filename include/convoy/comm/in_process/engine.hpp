// The engine comm::InProcess brings: replicas are threads of this process. When the Sync policy's
// rules are lock step (Synchronous aggregating every replica) it runs the fused
// reduce-apply-broadcast over shared memory; otherwise it runs the central store, driving the
// policy's rule object. A replica that outlasts the policy's timeout ends the run.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"
#include "../../core/snapshot.hpp"
#include "../../train/step.hpp"
#include "../replica_group.hpp"
#include "central_store.hpp"
#include "lock_step.hpp"

namespace convoy::comm::in_process {

template <class Model, class Placement, class Sync>
class Engine {
 public:
  using group_type = ReplicaGroup<Model, Placement>;

  /// Throws Error for policy knobs out of range, PlacementError for a placement that cannot be
  /// honoured.
  template <class Comm>
  Engine(Model prototype, Placement placement, Comm, Sync sync)
      : sync_(sync),
        group_(std::make_shared<group_type>(std::move(prototype), placement,
                                            needs_central(placement, sync))) {
    sync_.check(group_->size());
    lock_step_ = sync_.make_rules(group_->counters()).lock_step();
    if constexpr (has_central_memory<Placement>) {
      if (!lock_step_ && group_->context(0).on_device()) {
        throw PlacementError("convoy: " + std::string(Placement::name) + " on " +
                             group_->context(0).name + " computes only in lock step " +
                             "(sync::Synchronous aggregating every replica): the other modes " +
                             "update copies of the weights with the host's math");
      }
    }
    if (Placement::shared_weights && lock_step_) group_->bind_replicas_to_central();
  }

  group_type& state() { return *group_; }
  group_type const& state() const { return *group_; }
  /// True when every replica takes every step together, so a callback sees every replica at rest.
  bool lock_step() const { return lock_step_; }
  /// Replica `r`'s execution context.
  auto context(std::size_t r) const { return group_->context(r); }
  /// The last update's gradients, the mean over the replicas the optimizer applied, in lock step;
  /// empty otherwise, where replicas compute on while others apply.
  std::vector<float> mean_gradients() const {
    if (!lock_step_) return {};
    return group_->scaled_gradient_sum(group_->size(), 1.0f / static_cast<float>(group_->size()));
  }

  /// Runs the plan; blocks. Throws TimeoutError naming a replica whose step outlasted the policy's
  /// timeout: run() then returns without it, and its thread is left behind holding the replicas
  /// (this engine refuses further runs, see docs/architecture.md). Otherwise rethrows the first
  /// error of a replica, the optimizer or after_step once every thread has stopped, or throws
  /// ReplicaError after an asynchronous run in which some replicas failed.
  void run(RunPlan const& plan) {
    if (abandoned_) {
      throw Error("convoy: this strategy's " + abandoned_text_ +
                  " never came back from a step that timed out; its state is as of global step " +
                  std::to_string(group_->counters().global_step) +
                  ": save it with snapshot() and train a new strategy");
    }
    group_->check_optimizer_state();
    auto const shared_plan = std::make_shared<RunPlan const>(plan);
    std::vector<std::size_t> stuck;
    if (lock_step_) {
      stuck = run_lock_step(group_, shared_plan, sync_.timeout);
    } else {
      stuck = run_central_store(group_, shared_plan, sync_);
    }
    if (!stuck.empty()) {
      std::sort(stuck.begin(), stuck.end());  // named in order, whichever the watch saw first
      abandoned_ = true;
      abandoned_text_ = name_replicas(stuck);
      throw TimeoutError("convoy: " + abandoned_text_ + " did not finish a step within " +
                         std::to_string(sync_.timeout.count()) + " ms under " +
                         std::string(Sync::name) + "; the run stopped at global step " +
                         std::to_string(group_->counters().global_step));
    }
  }

  /// Where every variable lives and which replica computes where (log_device_placement).
  void log_placement(std::ostream& out, std::string_view comm_name) const {
    auto const replicas = group_->size();
    std::string where;
    if (group_->has_central()) {
      where = "/cpu:0 (one central copy; replicas " +
              std::string(lock_step_ ? "read it" : "pull copies of it") + ")";
    } else if (replicas == 1) {
      where = std::string(group_->context(0).name);
    } else {
      where = "mirrored on /cpu:0 replicas 0-" + std::to_string(replicas - 1);
    }
    out << "convoy placement: Strategy<" << Placement::name << ", " << comm_name << ", "
        << Sync::name << ">, " << replicas << " replica(s)\n";
    for (auto const& v : group_->layout().list()) {
      out << "convoy placement: " << v.name << " " << to_string(v.shape) << " -> " << where << "\n";
    }
    for (std::size_t r = 0; r < replicas; ++r) {
      out << "convoy placement: replica " << r << " computes forward_backward on "
          << group_->context(r).name << " thread " << r << "\n";
    }
  }

 private:
  static bool needs_central(Placement const& placement, Sync const& sync) {
    Counters probe;
    probe.local_steps.assign(static_cast<std::size_t>(std::max(1, placement.replica_count())), 0);
    return Placement::shared_weights || !sync.make_rules(probe).lock_step();
  }

  Sync sync_;
  std::shared_ptr<group_type> group_;  // shared with the threads of a run, which may outlive it
  bool lock_step_ = false;
  bool abandoned_ = false;
  std::string abandoned_text_;
};

}  // namespace convoy::comm::in_process
