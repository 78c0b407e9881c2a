// Strategy<Model, Placement, Communication, Synchronization>: the composed type a user picks. All
// the rules about which policies go together live here, as static_asserts that say what is wrong
// and what to write instead; DESIGN's compatibility table can be read off this one file.
#pragma once

#include <concepts>
#include <cstdint>
#include <iostream>
#include <span>
#include <sstream>
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

  /// Builds the replicas as copies of `prototype`, so all start with its weights; replica r's
  /// generator (Variables::rng) is reseeded from the prototype's so that replicas draw different
  /// streams. Throws PlacementError when a strict placement cannot be honoured, and Error for a
  /// replicas_to_aggregate or timeout out of range.
  explicit Strategy(Model prototype, Placement placement = {}, [[maybe_unused]] Comm comm = {},
                    Sync sync = {})
      : placement_(placement), sync_(sync) {
    resolve_placement();
    auto const replicas = static_cast<std::size_t>(placement_.replica_count());
    check_sync(replicas);
    std::uint64_t const base_seed = prototype.variables().rng()();
    state_.replicas.assign(replicas, prototype);
    for (std::size_t r = 0; r < replicas; ++r) {
      state_.replicas[r].variables().rng().seed(base_seed + 0x9E3779B97F4A7C15ULL * r);
    }
    state_.local_steps.assign(replicas, 0);
    if (uses_central()) {
      auto weights = state_.replicas[0].variables().weights();
      state_.central.assign(weights.begin(), weights.end());
      if (Placement::shared_weights && lock_step()) {
        for (auto& replica : state_.replicas) replica.variables().bind_weights(state_.central);
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
    state_.slots = optimizer.make_state(layout().element_count());
  }
  optim::Optimizer const& optimizer() const { return state_.optimizer; }
  optim::OptimizerState& optimizer_state() { return state_.slots; }

  /// Runs steps until plan.until; blocks. Rethrows the first exception a replica raised. Throws
  /// Error before starting when the optimizer state does not fit the optimizer and the model.
  void run(RunPlan const& plan) {
    check_optimizer_state();
    running_ = true;
    struct Done {
      bool& running;
      ~Done() { running = false; }
    } const done{running_};
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      if (replicas() == 1 && lock_step()) {
        comm::detail::run_single(state_, plan);
        return;
      }
      if (lock_step()) {
        comm::detail::run_allreduce(state_, plan, Placement::shared_weights, sync_.timeout);
        return;
      }
    }
    comm::detail::run_shared(state_, plan, shared_mode());
  }

  /// True when every replica takes every step together (one replica, or Synchronous aggregating
  /// all): between steps nothing computes, so a callback sees every replica at rest.
  bool lock_step() const {
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      return sync_.replicas_to_aggregate == 0 ||
             static_cast<std::size_t>(sync_.replicas_to_aggregate) == replicas();
    } else {
      return false;
    }
  }

  /// The authoritative weights (the central copy, or replica 0's when every replica mirrors them).
  /// Safe to read from a callback: it runs while no update is being applied.
  std::span<float const> weights() const {
    return uses_central() ? std::span<float const>(state_.central) : layout().weights();
  }
  /// Sets the weights of every replica (and the central copy). Throws ShapeError on a size
  /// mismatch.
  void assign_weights(std::span<float const> flat) {
    if (uses_central()) {
      state_.central.assign(flat.begin(), flat.end());
      if (Placement::shared_weights && lock_step()) return;  // the replicas read the central copy
    }
    for (auto& replica : state_.replicas) replica.variables().set_flat(flat);
  }

  /// Replica 0, holding the authoritative weights: for evaluation, saving and inspection between
  /// runs. Throws Error during a run (from a callback), where replica 0 may be computing; read
  /// weights() there instead.
  Model& model() {
    if (running_) {
      throw Error(
          "convoy: Strategy::model() was called during a run, while replica 0 may be "
          "computing; use weights() or Trainer::evaluate in a callback");
    }
    if (uses_central() && !lock_step()) state_.replicas[0].variables().set_flat(state_.central);
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
  /// Units of progress (steps, or global steps when asynchronous) in which every replica walks its
  /// slice of `global_batches` global batches: one epoch when that is the sampler's
  /// steps_per_epoch.
  double progress_per(std::size_t global_batches) const {
    double const batches = static_cast<double>(global_batches);
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      if (lock_step()) return batches;
      return batches * static_cast<double>(replicas()) / sync_.replicas_to_aggregate;
    } else {
      return batches * static_cast<double>(replicas());
    }
  }
  std::int64_t progress() const { return asynchronous() ? state_.global_step : state_.step; }

  /// Restores counters from a checkpoint. When it was written with another replica count, lock-step
  /// replicas all continue at `step`, and the others share the global steps evenly.
  void set_counters(std::int64_t step, std::int64_t global_step, std::int64_t dropped,
                    std::vector<std::int64_t> const& replica_steps) {
    state_.step = step;
    state_.global_step = global_step;
    state_.dropped = dropped;
    if (replica_steps.size() == state_.local_steps.size()) {
      state_.local_steps = replica_steps;
    } else {
      std::int64_t const each =
          lock_step() ? step : global_step / static_cast<std::int64_t>(replicas());
      state_.local_steps.assign(state_.local_steps.size(), each);
    }
  }

  /// Every replica's generator state, one line each; only meaningful while no replica computes
  /// (between runs, or in a callback of a lock-step run).
  std::string generator_state() const {
    std::ostringstream out;
    for (auto const& replica : state_.replicas) {
      out << const_cast<Model&>(replica).variables().rng() << "\n";
    }
    return out.str();
  }
  /// Restores generator_state()'s text. A text for another replica count is ignored: the streams
  /// then start afresh, as they would on a different machine.
  void set_generator_state(std::string const& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    if (lines.size() != replicas()) return;
    for (std::size_t r = 0; r < replicas(); ++r) {
      std::istringstream line(lines[r]);
      line >> state_.replicas[r].variables().rng();
    }
  }

  /// Prints, like TensorFlow's log_device_placement, where every variable lives and which replica
  /// computes on which device.
  void log_placement(std::ostream& out) const {
    std::string where;
    if (Placement::shared_weights || !lock_step()) {
      where = "/cpu:0 (one central copy; replicas " +
              std::string(lock_step() ? "read it" : "pull copies of it") + ")";
    } else if (replicas() == 1) {
      where = "/cpu:0";
    } else {
      where = "mirrored on /cpu:0 replicas 0-" + std::to_string(replicas() - 1);
    }
    out << "convoy placement: Strategy<" << Placement::name << ", " << Comm::name << ", "
        << Sync::name << ">, " << replicas() << " replica(s)\n";
    for (auto const& v : layout().list()) {
      out << "convoy placement: " << v.name << " " << to_string(v.shape) << " -> " << where << "\n";
    }
    for (std::size_t r = 0; r < replicas(); ++r) {
      out << "convoy placement: replica " << r << " computes forward_backward on /cpu:0 thread "
          << r << "\n";
    }
  }

 private:
  // Replica 0's Variables: names, shapes and offsets. A model need only offer a non-const
  // variables(), which does not change the model, so const members may call it.
  Variables& layout() const { return const_cast<Model&>(state_.replicas[0]).variables(); }

  bool uses_central() const { return Placement::shared_weights || !lock_step(); }

  void check_sync(std::size_t replicas) const {
    if constexpr (std::same_as<Sync, sync::Synchronous>) {
      if (sync_.replicas_to_aggregate < 0 ||
          static_cast<std::size_t>(sync_.replicas_to_aggregate) > replicas) {
        throw Error("convoy: replicas_to_aggregate is " +
                    std::to_string(sync_.replicas_to_aggregate) + " but there are " +
                    std::to_string(replicas) + " replicas; pick 1.." + std::to_string(replicas) +
                    " (0: all)");
      }
    }
    if constexpr (requires { sync_.timeout; }) {
      if (sync_.timeout.count() <= 0) {
        throw Error("convoy: " + std::string(Sync::name) + "'s timeout is " +
                    std::to_string(sync_.timeout.count()) + " ms; it must be positive");
      }
    }
  }

  void check_optimizer_state() const {
    auto const& slots = state_.slots.slots;
    bool fits = slots.size() == state_.optimizer.slot_names().size();
    for (auto const& slot : slots) fits = fits && slot.size() == layout().element_count();
    if (!fits) {
      throw Error("convoy: the optimizer state does not fit " +
                  std::string(state_.optimizer.name()) + " and the model's " +
                  std::to_string(layout().element_count()) +
                  " weights; set it with set_optimizer()");
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
      return {Kind::asynchronous, 0, 0, {}};  // asynchronous replicas never wait on each other
    }
  }

  void resolve_placement() {
    if constexpr (std::same_as<Placement, place::Gpu>) {
      std::string const what = "convoy: place::Gpu{device " + std::to_string(placement_.device) +
                               "} cannot be honoured: this build has no CUDA backend";
      if (placement_.strict) {
        throw PlacementError(what + " (strict placement); use place::Host, or turn strict off");
      }
      std::clog << what << "; running on the host (/cpu:0) instead\n";
    }
  }

  Placement placement_;
  Sync sync_;
  bool running_ = false;
  comm::detail::ReplicaState<Model> state_;
};

}  // namespace convoy
