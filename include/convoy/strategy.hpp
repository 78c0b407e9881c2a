// Strategy<Model, Placement, Communication, Synchronization>: the composed type a user picks. All
// the rules about which policies go together live here, as static_asserts that say what is wrong
// and what to write instead; DESIGN's compatibility table can be read off this one file.
#pragma once

#include <concepts>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/detail/in_process_allreduce.hpp"
#include "comm/detail/in_process_shared.hpp"
#include "comm/detail/replica_state.hpp"
#include "comm/in_process.hpp"
#include "core/concepts.hpp"
#include "core/error.hpp"
#include "optim/optimizer.hpp"
#include "place/central_storage.hpp"
#include "place/gpu.hpp"
#include "place/host.hpp"
#include "place/mirrored.hpp"
#include "sync/asynchronous.hpp"
#include "sync/bounded_staleness.hpp"
#include "sync/synchronous.hpp"
#include "train/step.hpp"

namespace convoy {

namespace detail {
template <class S>
inline constexpr bool is_bounded_staleness = false;
template <int N>
inline constexpr bool is_bounded_staleness<sync::BoundedStaleness<N>> = true;

template <class P>
inline constexpr bool is_single_replica =
    std::same_as<P, place::Host> || std::same_as<P, place::Gpu>;
}  // namespace detail

/// A model distributed by a placement, a communication and a synchronization policy. Owns the
/// replicas (copies of the model it is given) and their weights. Not thread-safe: one driver at a
/// time calls run().
template <class Model, class Placement, class Comm, class Sync>
class Strategy {
  // The model, one requirement at a time, each printing the signature to write.
  static_assert(has_variables<Model>,
                "convoy: a Model needs 'convoy::Variables& variables()' returning the Variables "
                "that hold its "
                "weights; see examples/00_weight_averaging.");
  static_assert(has_forward_backward<Model>,
                "convoy: a Model needs 'float forward_backward(convoy::Batch const&)' that returns "
                "the batch's mean "
                "loss and overwrites every gradient; see examples/02_fashion_mnist.");
  static_assert(replicable<Model>,
                "convoy: a Model must be copy-constructible: replicas are copies of the model "
                "given to the Strategy.");
  // Each policy in its slot.
  static_assert(
      placement_policy<Placement>,
      "convoy: Strategy's second argument must be a placement policy: place::Host, place::Gpu, "
      "place::Mirrored or place::CentralStorage.");
  static_assert(
      communication_policy<Comm>,
      "convoy: Strategy's third argument must be a communication policy: comm::InProcess.");
  static_assert(
      synchronization_policy<Sync>,
      "convoy: Strategy's fourth argument must be a synchronization policy: sync::Synchronous, "
      "sync::Asynchronous or sync::BoundedStaleness<S>.");
  // Forbidden pairs.
  static_assert(!(detail::is_single_replica<Placement> && !std::same_as<Sync, sync::Synchronous>),
                "convoy: place::Host and place::Gpu run one replica, which has nobody to be "
                "asynchronous with; "
                "use place::Mirrored or place::CentralStorage with sync::Asynchronous or "
                "sync::BoundedStaleness<S>, or sync::Synchronous with one replica.");

 public:
  using model_type = Model;
  using placement_type = Placement;
  using comm_type = Comm;
  using sync_type = Sync;

  /// Builds the replicas as copies of `prototype`, so all start with its weights. Throws
  /// PlacementError when a strict placement cannot be honoured.
  explicit Strategy(Model prototype, Placement placement = {}, Comm comm = {}, Sync sync = {})
      : placement_(placement), comm_(comm), sync_(sync) {
    resolve_placement();
    auto const replicas = static_cast<std::size_t>(placement_.replica_count());
    state_.replicas.assign(replicas, prototype);
    state_.local_steps.assign(replicas, 0);
    if (uses_central()) {
      auto weights = state_.replicas[0].variables().weights();
      state_.central.assign(weights.begin(), weights.end());
      if (Placement::shared_weights && !lock_based()) {
        for (auto& replica : state_.replicas) replica.variables().bind_weights(state_.central);
      }
    }
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      if (sync_.replicas_to_aggregate < 0 ||
          static_cast<std::size_t>(sync_.replicas_to_aggregate) > replicas) {
        throw Error("convoy: replicas_to_aggregate is " +
                    std::to_string(sync_.replicas_to_aggregate) + " but there are " +
                    std::to_string(replicas) + " replicas; pick 1.." + std::to_string(replicas) +
                    " (0: all)");
      }
    }
    set_optimizer(optim::Sgd{});
    if (placement_.log_placement) log_placement(std::clog);
  }

  // Replicas may be bound to this object's central arena, so a copy could not be made safe.
  Strategy(Strategy const&) = delete;
  Strategy& operator=(Strategy const&) = delete;
  Strategy(Strategy&&) noexcept = default;
  Strategy& operator=(Strategy&&) noexcept = default;

  std::size_t replicas() const { return state_.replicas.size(); }
  Placement const& placement() const { return placement_; }
  Sync const& synchronization() const { return sync_; }

  /// Replaces the optimizer and zeroes its slots.
  void set_optimizer(optim::Optimizer optimizer) {
    state_.optimizer = optimizer;
    state_.slots = optimizer.make_state(state_.replicas[0].variables().element_count());
  }
  optim::Optimizer const& optimizer() const { return state_.optimizer; }
  optim::OptimizerState& optimizer_state() { return state_.slots; }

  /// Runs steps until plan.until; blocks. Rethrows the first exception a replica raised.
  void run(RunPlan const& plan) {
    if (replicas() == 1 && !lock_based()) {
      comm::detail::run_single(state_, plan);
    } else if (!lock_based()) {
      comm::detail::run_allreduce(state_, plan, Placement::shared_weights, step_timeout());
    } else {
      comm::detail::run_shared(state_, plan, shared_mode());
    }
  }

  /// The authoritative weights (the central copy, or replica 0's when every replica mirrors them).
  std::span<float const> weights() const {
    return uses_central() ? std::span<float const>(state_.central)
                          : state_.replicas[0].variables().weights();
  }
  /// Sets the weights of every replica (and the central copy). Throws ShapeError on a size
  /// mismatch.
  void assign_weights(std::span<float const> flat) {
    for (auto& replica : state_.replicas) replica.variables().set_flat(flat);
    if (uses_central()) std::copy(flat.begin(), flat.end(), state_.central.begin());
  }

  /// Replica 0, holding the authoritative weights: for evaluation, saving and inspection.
  Model& model() {
    if (uses_central() && lock_based()) state_.replicas[0].variables().set_flat(state_.central);
    return state_.replicas[0];
  }
  Model& replica(std::size_t r) { return state_.replicas[r]; }

  std::int64_t step() const { return state_.step; }
  std::int64_t global_step() const { return state_.global_step; }
  std::int64_t dropped() const { return state_.dropped; }
  std::vector<std::int64_t> const& replica_steps() const { return state_.local_steps; }
  /// True when progress counts global steps (every gradient applied on its own) rather than
  /// synchronized steps.
  static constexpr bool asynchronous() { return !std::same_as<Sync, sync::Synchronous>; }
  /// Rows of data one unit of progress consumes, for a global batch of `batch` rows.
  std::size_t rows_per_progress(std::size_t batch) const {
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      if (lock_based())
        return batch / replicas() * static_cast<std::size_t>(sync_.replicas_to_aggregate);
      return batch;
    } else {
      return batch / replicas();
    }
  }
  std::int64_t progress() const { return asynchronous() ? state_.global_step : state_.step; }
  /// Restores counters from a checkpoint.
  void set_counters(std::int64_t step, std::int64_t global_step,
                    std::vector<std::int64_t> const& replica_steps) {
    state_.step = step;
    state_.global_step = global_step;
    if (replica_steps.size() == state_.local_steps.size()) {
      state_.local_steps = replica_steps;
    } else {
      state_.local_steps.assign(state_.local_steps.size(), step);
    }
  }

  /// Prints, like TensorFlow's log_device_placement, where every variable lives and which replica
  /// computes on which device.
  void log_placement(std::ostream& out) const {
    auto const& vars = state_.replicas[0].variables();
    std::string where;
    if (Placement::shared_weights || lock_based()) {
      where = "/cpu:0 (one central copy; replicas " +
              std::string(lock_based() ? "pull copies of it" : "read it") + ")";
    } else if (replicas() == 1) {
      where = "/cpu:0";
    } else {
      where = "mirrored on /cpu:0 replicas 0-" + std::to_string(replicas() - 1);
    }
    out << "convoy placement: Strategy<" << Placement::name << ", " << Comm::name << ", "
        << Sync::name << ">, " << replicas() << " replica(s)\n";
    for (auto const& v : vars.list())
      out << "convoy placement: " << v.name << " " << to_string(v.shape) << " -> " << where << "\n";
    for (std::size_t r = 0; r < replicas(); ++r) {
      out << "convoy placement: replica " << r << " computes forward_backward on /cpu:0 thread "
          << r << "\n";
    }
  }

 private:
  // Asynchronous work, bounded staleness and partial aggregation pull copies of a central truth.
  bool lock_based() const {
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      return sync_.replicas_to_aggregate != 0 &&
             static_cast<std::size_t>(sync_.replicas_to_aggregate) < replicas();
    } else {
      return true;
    }
  }
  bool uses_central() const { return Placement::shared_weights || lock_based(); }

  std::chrono::milliseconds step_timeout() const {
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      return sync_.timeout;
    } else {
      return std::chrono::minutes(5);
    }
  }

  comm::detail::SharedMode shared_mode() const {
    using Kind = comm::detail::SharedMode::Kind;
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      return {Kind::aggregate, 0, static_cast<std::size_t>(sync_.replicas_to_aggregate),
              sync_.timeout};
    } else if constexpr (detail::is_bounded_staleness<Sync>) {
      return {Kind::bounded, Sync::staleness, 0, sync_.timeout};
    } else {
      return {Kind::asynchronous, 0, 0, std::chrono::minutes(5)};
    }
  }

  void resolve_placement() {
    if constexpr (std::same_as<Placement, place::Gpu>) {
      std::string const what = "convoy: place::Gpu{device " + std::to_string(placement_.device) +
                               "} cannot be honoured: this build has no CUDA backend";
      if (placement_.strict)
        throw PlacementError(what + " (strict placement); use place::Host, or turn strict off");
      std::clog << what << "; running on the host (/cpu:0) instead\n";
    }
  }

  Placement placement_;
  Comm comm_;
  Sync sync_;
  comm::detail::ReplicaState<Model> state_;
};

}  // namespace convoy
