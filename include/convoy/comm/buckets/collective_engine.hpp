// CollectiveEngine: the engine of a Comm whose replicas exchange through a collective, an allreduce
// among equals with no central copy (comm::Nccl). It is generic over the fabric that gives each of
// this process's replicas its exchange: NCCL on CUDA devices (comm/nccl/engine.hpp), or the
// in-process bucket exchange (comm/in_process/bucket_fabric.hpp), which runs this same code on the
// host in the tests. Every replica of every process takes every step. At the start of each run
// every replica takes the weights, optimizer slots and counters of the run's replica 0, so ranks
// built from other seeds, and ranks whose chief alone resumed from a checkpoint, go on from one
// state (what DDP does with the parameters at construction).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <memory_resource>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"
#include "../../core/snapshot.hpp"
#include "../../optim/optimizer.hpp"
#include "../../sync/synchronous.hpp"
#include "../../train/step.hpp"
#include "../in_process/replica_threads.hpp"
#include "../in_process/step_barrier.hpp"
#include "../in_process/step_count.hpp"
#include "../replica_group.hpp"
#include "bucket_plan.hpp"
#include "collective_replica.hpp"
#include "host_staged_exchange.hpp"

namespace convoy::comm {

/// What CollectiveEngine needs of a fabric, built as Fabric(comm_policy, group, bucket_plan): the
/// exchange of each of this process's replicas, where they stand among all the run's replicas,
/// and a way to stop the others when one fails.
template <class F>
concept collective_fabric = requires(F& f, F const& cf, std::size_t r, std::string const& why) {
  requires bucket_exchange<std::remove_reference_t<decltype(f.exchange(r))>>;
  { cf.world_size() } -> std::convertible_to<std::size_t>;     ///< replicas in the whole run
  { cf.first_replica() } -> std::convertible_to<std::size_t>;  ///< the run's index of our replica 0
  { cf.describe() } -> std::convertible_to<std::string>;       ///< for the placement log
  f.abort(why);  ///< wakes every replica waiting on the exchange; the fabric is spent
};

/// Optional on a fabric: `std::string explain_timeout() const`, what it can say after a timed-out
/// exchange of who stopped answering (the liveness board of bootstrap::ProcessGroup).
template <class F>
concept explains_timeouts = requires(F const& f) {
  { f.explain_timeout() } -> std::convertible_to<std::string>;
};

/// Optional on a fabric: a way on after another process was lost. may_regroup() says whether an
/// exchange failed on another process's account and the policy lets the survivors go on;
/// regroup(replica_group, plan, global_step, step_time, why) returns the fabric of the survivors'
/// new group (step_time: the last step's, by which the survivors notice a loss of one another),
/// or throws when they may not go on; members() names each process, by rank, by its rank in the
/// run's first group, so that the counters follow their replicas.
template <class F, class Group>
concept regroups = requires(F& f, F const& cf, Group& g, BucketPlan const& plan, std::int64_t step,
                            std::chrono::milliseconds step_time, std::string const& why) {
  { cf.may_regroup() } -> std::convertible_to<bool>;
  { f.regroup(g, plan, step, step_time, why) } -> std::same_as<std::unique_ptr<F>>;
  { cf.members() } -> std::convertible_to<std::vector<std::size_t>>;
};

namespace detail {
// Counters travel through the sum exchange as floats, every other replica adding zeros: each
// int64's 64 bits as four 16-bit pieces, which a float holds exactly, so the sum is the value
// itself, its sign included (Counters::retired goes below 0 in a group grown past its start).
inline constexpr std::size_t pieces_per_count = 4;
inline void encode_counts(std::span<std::int64_t const> counts, std::span<float> out) {
  for (std::size_t i = 0; i < counts.size(); ++i) {
    auto const v = static_cast<std::uint64_t>(counts[i]);
    for (std::size_t k = 0; k < pieces_per_count; ++k)
      out[i * pieces_per_count + k] = static_cast<float>((v >> (16 * k)) & 0xFFFF);
  }
}
inline void decode_counts(std::span<float const> in, std::span<std::int64_t> counts) {
  for (std::size_t i = 0; i < counts.size(); ++i) {
    std::uint64_t v = 0;
    for (std::size_t k = 0; k < pieces_per_count; ++k)
      v |= static_cast<std::uint64_t>(in[i * pieces_per_count + k]) << (16 * k);
    counts[i] = static_cast<std::int64_t>(v);
  }
}
}  // namespace detail

/// What a collective engine answers for (Strategy's state()): this process's replicas, by name,
/// with size() counting every replica of the run, so that the sampler gives each its own slice.
template <class Model, class Placement>
class CollectiveState {
 public:
  using group_type = ReplicaGroup<Model, Placement>;

  CollectiveState(Model prototype, Placement placement)
      : group_(std::move(prototype), placement, /*central=*/false) {}

  group_type& group() { return group_; }
  group_type const& group() const { return group_; }
  /// Every replica of the run, in every process.
  std::size_t size() const { return group_.counted_replicas(); }
  /// The replicas the data's plan is made for: the run's first group's (a process that joined a
  /// group that changed since plans as that one did).
  std::size_t planned_replicas() const { return planned_ != 0 ? planned_ : size(); }
  void plan_for(std::size_t replicas) { planned_ = replicas; }
  Variables const& layout() const { return group_.layout(); }
  Counters const& counters() const { return group_.counters(); }
  optim::Optimizer const& optimizer() const { return group_.optimizer(); }
  void set_optimizer(optim::Optimizer optimizer) { group_.set_optimizer(optimizer); }
  void set_learning_rate(float rate) { group_.set_learning_rate(rate); }
  void read_weights(std::span<float> out) const { group_.read_weights(out); }
  /// This process's state by name, with the counters of the whole run (and no generators when
  /// other processes hold replicas too: ReplicaGroup::snapshot).
  Snapshot snapshot() const { return group_.snapshot(); }
  /// Restores this process's replicas. At the next run every process takes replica 0's state, so
  /// restoring on the chief alone is enough.
  void restore(Snapshot const& snapshot) { group_.restore(snapshot); }
  /// The same for weights: those of the process holding the run's replica 0 win at the next run.
  void set_weights(std::map<std::string, Tensor> const& named) { group_.set_weights(named); }
  Model const& model() const { return group_.model(); }

 private:
  group_type group_;
  std::size_t planned_ = 0;  // plan_for(); 0: size()
};

namespace detail {
// The fabric's port itself, by reference.
template <bucket_exchange Port>
class PortOf {
 public:
  PortOf(Port& port, auto const&, HostStages&) : port_(&port) {}
  void start(std::size_t bucket, std::span<float> values) { port_->start(bucket, values); }
  void wait() { port_->wait(); }

 private:
  Port* port_;
};
// A replica's exchange: the fabric's port, or that port fed through page-locked host memory when
// the fabric reads host memory and the replica may compute on a device (HostStagedExchange).
template <class Fabric, class Context>
struct exchange_of {
  using port = std::remove_reference_t<decltype(std::declval<Fabric&>().exchange(0))>;
  static constexpr bool staged = reads_host_memory<Fabric> && stages_through_host<Context>;
  using type = std::conditional_t<staged, HostStagedExchange<port, Context>, PortOf<port>>;
};
}  // namespace detail

template <class Model, class Placement, class Sync, collective_fabric Fabric>
class CollectiveEngine {
  using context_type = typename Placement::context_type;
  using exchange_of = detail::exchange_of<Fabric, context_type>;
  using replica_type = CollectiveReplica<Model, context_type, typename exchange_of::type, Sync>;

 public:
  using state_type = CollectiveState<Model, Placement>;

  /// Builds this process's replicas, then the fabric (which may wait for the other processes).
  /// Throws Error for Synchronous with replicas_to_aggregate other than every replica (a collective
  /// has no backup replicas), and what the fabric throws.
  template <class Comm>
  CollectiveEngine(Model prototype, Placement placement, Comm const& comm, Sync sync)
      : sync_(sync),
        state_(std::make_unique<state_type>(std::move(prototype), placement)),
        plan_(state_->layout(), comm.bucket_bytes),
        bucket_bytes_(comm.bucket_bytes),
        fabric_(std::make_unique<Fabric>(comm, state_->group(), plan_)) {
    auto const world = static_cast<std::size_t>(fabric_->world_size());
    if constexpr (requires { fabric_->first_world_size(); }) {
      state_->plan_for(fabric_->first_world_size());
    }
    sync_.check(world);
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      auto const m = static_cast<std::size_t>(sync.replicas_to_aggregate);
      if (m != 0 && m != world) {
        throw Error("convoy: " + std::string(Comm::name) + " sums every replica's gradients in " +
                    "each step; replicas_to_aggregate " + std::to_string(m) + " of " +
                    std::to_string(world) + " needs a parameter server (comm::ZmqPs) or " +
                    "comm::InProcess; leave it 0 here");
      }
    }
    state_->group().count_replicas(world);
  }

  state_type& state() { return *state_; }
  state_type const& state() const { return *state_; }
  /// Every replica takes every step; callbacks run with all of this process's replicas at rest.
  bool lock_step() const { return true; }
  /// The process holding the run's replica 0 writes checkpoints; the others take its state at the
  /// start of each run.
  bool chief() const { return fabric_->first_replica() == 0; }
  Fabric& fabric() { return *fabric_; }
  /// This process's replica `r`'s execution context.
  auto context(std::size_t r) const { return state_->group().context(r); }

  /// The gradients of the last step, laid out like the weights (zeros before the first), for
  /// Strategy::get_gradients. Under Synchronous, the mean over every replica of the run: what the
  /// optimizer applied, which each replica holds summed after the exchange. Under
  /// BoundedStaleness<S>, where each replica applies its own, the mean of this process's replicas'.
  /// Between runs or in a callback, where this process's replicas are at rest.
  std::vector<float> mean_gradients() const {
    auto const& group = state_->group();
    if constexpr (collective_schedule<Sync>::averages_weights) {
      return group.scaled_gradient_sum(group.size(), 1.0f / static_cast<float>(group.size()));
    } else {
      return group.scaled_gradient_sum(1, 1.0f / static_cast<float>(fabric_->world_size()));
    }
  }

  /// Runs the plan; blocks. Every process of the run must run the same plan: the goal is reached
  /// by every one at the same global step; an after_step that stops one process alone leaves the
  /// others waiting in their next exchange until its timeout. When another process is lost and
  /// the fabric regroups (comm::Gloo), the survivors go on in the new group from the state of the
  /// member furthest on. Throws what a replica, the exchange (TimeoutError naming who did not
  /// answer), a regroup or after_step threw; after an exchange failed for good, the fabric is
  /// spent and later runs throw Error.
  void run(RunPlan const& plan) {
    for (;;) {
      try {
        return run_once(plan);
      } catch (std::exception const& e) {
        if constexpr (regroups<Fabric, typename state_type::group_type>) {
          if (fabric_->may_regroup()) {
            regroup(plan, e.what());
            continue;
          }
        }
        throw;
      }
    }
  }

 private:
  // The survivors' new group: its fabric, the counters of the replicas that go on, under their
  // new numbers, and where the data goes on from (the plan's replan). The next run_once starts
  // with every replica taking the new replica 0's state and counters: the member furthest on, so
  // a step some survivors applied is neither lost nor redone, nor its rows drawn again.
  void regroup(RunPlan const& plan, std::string const& why) {
    auto& group = state_->group();
    std::vector<std::size_t> const before = fabric_->members();
    auto const old_steps = group.counters().local_steps;
    auto const step_time = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::duration<double>(step_seconds_.empty() ? 0.0 : step_seconds_[0]));
    auto next = fabric_->regroup(group, plan_, group.counters().global_step, step_time, why);
    fabric_ = std::move(next);
    std::vector<std::size_t> const after = fabric_->members();
    std::size_t const local = group.size();
    std::vector<std::int64_t> steps(after.size() * local, 0);
    for (std::size_t p = 0; p < before.size(); ++p) {  // the batches of those who left
      if (std::find(after.begin(), after.end(), before[p]) != after.end()) continue;
      for (std::size_t i = 0; i < local && p * local + i < old_steps.size(); ++i)
        group.counters().retired += old_steps[p * local + i];
    }
    for (std::size_t p = 0; p < after.size(); ++p) {
      auto const was = static_cast<std::size_t>(std::find(before.begin(), before.end(), after[p]) -
                                                before.begin());
      for (std::size_t i = 0; i < local && was * local + i < old_steps.size(); ++i)
        steps[p * local + i] = old_steps[was * local + i];
    }
    group.count_replicas(fabric_->world_size());
    group.counters().local_steps = std::move(steps);
    if (plan.replan) {
      group.counters().data =
          plan.replan(group.counters().data, group.counters().global_step, fabric_->world_size());
    }
    spent_.clear();
  }

  void check_not_spent() const {
    if (!spent_.empty()) {
      throw Error("convoy: this strategy's collective stopped in an earlier run (" + spent_ +
                  "); its state is as of global step " +
                  std::to_string(state_->counters().global_step) +
                  ": save it with snapshot() and build a new strategy");
    }
  }

  // Replica 0 steps the slots a snapshot saves; the others keep their own, taken from replica
  // 0's at the start of the run.
  std::vector<optim::OptimizerState> make_own_slots() const {
    auto const& group = state_->group();
    std::vector<optim::OptimizerState> own_slots;
    for (std::size_t r = 1; r < group.size(); ++r) {
      own_slots.push_back(
          group.optimizer().make_state(group.layout(), memory_of(group.context(r))));
    }
    return own_slots;
  }

  void run_once(RunPlan const& plan) {
    check_not_spent();
    auto& group = state_->group();
    group.check_optimizer_state();
    std::size_t const local = group.size();
    stages_.resize(local);
    auto own_slots = make_own_slots();
    auto slots_of = [&](std::size_t r) -> optim::OptimizerState& {
      return r == 0 ? group.slots() : own_slots[r - 1];
    };
    std::vector<float> losses(local, 0.0f);
    // Each replica's last step (kept across runs: a regroup reads it).
    step_seconds_.resize(local, 0.0);
    auto& seconds = step_seconds_;
    in_process::FirstError error;
    std::atomic<bool> failed{false};
    bool stop = false;  // written only by the barrier's completion (or the one thread)
    auto const barrier = std::make_unique<in_process::StepBarrier>(local);

    auto finish_step = [&]() noexcept {
      if (failed.load()) {
        stop = true;
        return;
      }
      if (in_process::count_lock_step(group.counters(), losses, seconds[0],
                                      fabric_->first_replica(), plan, error))
        stop = true;
    };
    auto fail = [&](std::size_t r) {
      error.capture(explained(std::current_exception()));
      failed = true;
      try {
        fabric_->abort("replica " + std::to_string(fabric_->first_replica() + r) + " failed");
      } catch (...) {  // the first error is the one to report
      }
      barrier->abort();
    };
    auto replica_loop = [&](std::size_t r) {
      auto const ctx = group.context(r);
      auto const scope = ctx.enter();
      try {
        typename exchange_of::type exchange(fabric_->exchange(r), ctx, stages_[r]);
        auto const start = take_replica_zero(r, exchange, slots_of(r));
        replica_type replica(group.replica(r), ctx, plan_, exchange, group.counted_replicas(),
                             group.optimizer(), slots_of(r));
        auto const global = fabric_->first_replica() + r;
        if (plan.reached(start.global_step, start.batches())) return;
        auto const data = planned_data(plan, start);
        // This thread's own count: replica 0's thread writes the group's counters meanwhile. The
        // rows follow the group's global step where the plan can re-plan them for a new group.
        for (std::int64_t local_step = start.local_steps[global], step = start.global_step;;
             ++local_step, ++step) {
          Batch const batch =
              plan.batch_at ? plan.batch_at(global, step, data) : plan.batch(global, local_step);
          auto const began = std::chrono::steady_clock::now();
          losses[r] = replica.step(batch);
          seconds[r] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
          if (local == 1) {
            finish_step();
          } else if (!barrier->arrive_and_wait(finish_step)) {
            return;
          }
          if (stop) return;
        }
      } catch (...) {
        fail(r);
      }
    };
    if (local == 1) {
      replica_loop(0);
    } else {
      std::vector<std::jthread> threads;
      for (std::size_t r = 0; r < local; ++r) threads.emplace_back(replica_loop, r);
    }
    if (error.has_error()) {
      if (failed.load()) spent_ = "an exchange was aborted when a replica failed";
      error.rethrow();
    }
  }

 public:
  /// Where every variable lives and which replica computes where (log_device_placement).
  void log_placement(std::ostream& out, std::string_view comm_name) const {
    auto const& group = state_->group();
    auto const first = fabric_->first_replica();
    out << "convoy placement: Strategy<" << Placement::name << ", " << comm_name << ", "
        << Sync::name << ">, replicas " << first << "-" << first + group.size() - 1 << " of "
        << group.counted_replicas() << " here; " << fabric_->describe() << "\n";
    out << "convoy placement: " << plan_.size() << " gradient bucket(s) of at least "
        << bucket_bytes_ << " bytes\n";
    for (auto const& v : group.layout().list()) {
      out << "convoy placement: " << v.name << " " << to_string(v.shape) << " -> mirrored on ";
      for (std::size_t r = 0; r < group.size(); ++r)
        out << (r == 0 ? "" : ", ") << group.context(r).name;
      out << "\n";
    }
    for (std::size_t r = 0; r < group.size(); ++r) {
      out << "convoy placement: replica " << first + r << " computes forward_backward on "
          << group.context(r).name << " thread " << r << "\n";
    }
  }

 private:
  template <class Context>
  static std::pmr::memory_resource* memory_of(Context const& ctx) {
    if constexpr (has_arena_memory<Context>) {
      return ctx.memory();
    } else {
      return std::pmr::new_delete_resource();
    }
  }

  // A timed-out exchange, with what the fabric can say of who stopped answering (the liveness
  // board of the Gloo and NCCL fabrics); anything else as it is.
  std::exception_ptr explained(std::exception_ptr e) const {
    if constexpr (explains_timeouts<Fabric>) {
      try {
        std::rethrow_exception(e);
      } catch (TimeoutError const& timeout) {
        auto const why = fabric_->explain_timeout();
        if (!why.empty()) {
          return std::make_exception_ptr(TimeoutError(std::string(timeout.what()) + "; " + why));
        }
      } catch (...) {
      }
    }
    return e;
  }

  // Where this run's rows come from: the counters' origin, planned again for this group's size
  // when a snapshot of a group of another size was restored.
  DataOrigin planned_data(RunPlan const& plan, Counters const& start) const {
    auto const replicas = state_->group().counted_replicas();
    if (!plan.replan || start.data.replicas == 0 ||
        static_cast<std::size_t>(start.data.replicas) == replicas)
      return start.data;
    return plan.replan(start.data, start.global_step, replicas);
  }

  // Replica r takes the run's replica 0's weights, slots and counters: each is summed over the
  // replicas with every other replica's part zeroed. Returns the counters; replica 0's thread
  // also writes them into the group, which the other threads read only after a barrier.
  template <class Exchange>
  Counters take_replica_zero(std::size_t r, Exchange& exchange, optim::OptimizerState& slots) {
    auto& group = state_->group();
    auto const ctx = group.context(r);
    bool const root = fabric_->first_replica() + r == 0;
    auto share = [&](std::span<float> x) {
      if (!root) detail::fill_zero(ctx, x);
      exchange.start(0, x);
      exchange.wait();
    };
    share(group.variables(r).weights());
    for (auto& slot : slots.slots) share(slot);

    // Read before this replica hands in its part, which replica 0's thread waits for before it
    // writes the group's counters below.
    Counters counters = group.counters();
    std::vector<std::int64_t> counts{slots.updates,       counters.global_step,   counters.applied,
                                     counters.dropped,    counters.data.step,     counters.data.row,
                                     counters.data.batch, counters.data.replicas, counters.retired};
    counts.insert(counts.end(), counters.local_steps.begin(), counters.local_steps.end());
    std::pmr::vector<float> wire(counts.size() * detail::pieces_per_count, 0.0f, memory_of(ctx));
    if (root) detail::encode_counts(counts, wire);
    exchange.start(0, wire);
    exchange.wait();
    detail::decode_counts(wire, counts);
    slots.updates = counts[0];
    counters.global_step = counts[1];
    counters.applied = counts[2];
    counters.dropped = counts[3];
    counters.data = {
        .step = counts[4], .row = counts[5], .batch = counts[6], .replicas = counts[7]};
    counters.retired = counts[8];
    std::copy(counts.begin() + 9, counts.end(), counters.local_steps.begin());
    if (r == 0) group.counters() = counters;
    return counters;
  }

  Sync sync_;
  std::unique_ptr<state_type> state_;  // on the heap: the fabric keeps references into it
  BucketPlan plan_;
  std::size_t bucket_bytes_;
  // Each replica's page-locked copies of its buckets (a device replica over a fabric that reads
  // host memory): before fabric_, whose thread may use them until it is gone.
  std::vector<HostStages> stages_;
  std::unique_ptr<Fabric> fabric_;
  std::string spent_;
  std::vector<double> step_seconds_;  // each local replica's last step, in seconds
};

}  // namespace convoy::comm
