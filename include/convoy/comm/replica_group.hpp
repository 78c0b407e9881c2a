// ReplicaGroup: what every engine of one process trains: the replicas (copies of the user's model),
// the central weights when the engine keeps one, the optimizer and its slots, and the counters.
// It answers for all of them by name (snapshot, restore, set_weights), checking everything before
// it changes anything, so an engine need only write its run loop.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/detail/aligned_allocator.hpp"
#include "../core/error.hpp"
#include "../core/gradient_places.hpp"
#include "../core/snapshot.hpp"
#include "../core/variables.hpp"
#include "../optim/optimizer.hpp"
#include "unpacked_snapshot.hpp"

namespace convoy::comm {

template <class Model, class Placement>
class ReplicaGroup {
 public:
  using model_type = Model;
  using context_type = typename Placement::context_type;

  /// Builds `placement.replica_count()` replicas by copy-constructing `prototype` (never by
  /// assignment, so models with const members work), and a central copy of the weights when
  /// `central` is set. Replica r's generator is reseeded from the prototype's so that replicas
  /// draw different streams. Throws PlacementError when the placement cannot be honoured.
  ReplicaGroup(Model prototype, Placement placement, bool central) : placement_(placement) {
    // A model that computes on the host only tells a placement that could put it on a device,
    // which then falls back to the host in one line, or refuses under strict placement.
    auto const host_only = host_only_reason<Model, context_type>();
    if constexpr (hears_host_only_models<Placement>) placement_.host_only_because = host_only;
    if constexpr (resolves_devices<Placement>) placement_.resolve();
    if constexpr (may_compute_on_device<context_type> && !hears_host_only_models<Placement>) {
      if (!host_only.empty() && placement_.context(0).on_device()) {
        throw PlacementError("convoy: " + std::string(Placement::name) + " puts the replicas on " +
                             placement_.context(0).name + ", but " + host_only);
      }
    }
    auto const count = static_cast<std::size_t>(std::max(1, placement_.replica_count()));
    std::uint64_t const base_seed = prototype.variables().rng()();
    replicas_.reserve(count);
    for (std::size_t r = 0; r < count; ++r) {
      replicas_.push_back(std::make_shared<Model>(prototype));
      replicas_[r]->variables().rng().seed(base_seed + 0x9E3779B97F4A7C15ULL * r);
      // A device placement moves the replica's arenas to its device (exec::Cuda::adopt).
      if constexpr (adopts_replicas<Placement>) {
        placement_.adopt(replicas_[r]->variables(), r);
      }
    }
    if (central) {
      if constexpr (may_compute_on_device<typename Placement::context_type> &&
                    !has_central_memory<Placement>) {
        if (placement_.context(0).on_device()) {
          throw PlacementError("convoy: " + std::string(Placement::name) + " on " +
                               placement_.context(0).name +
                               " computes only in lock step (sync::Synchronous): a central copy "
                               "of the weights is host memory");
        }
      }
      auto const w = layout().weights();
      allocate_central(w.size());
      layout().copy(central_.data(), w.data(), w.size());
    }
    for (auto& r : replicas_) places_.emplace_back(r->variables());
    counters_.local_steps.assign(count, 0);
    set_optimizer(optim::Sgd{});
  }

  // Moving keeps every arena where it is (replicas bound to the central copy stay bound).
  ReplicaGroup(ReplicaGroup&&) noexcept = default;
  ReplicaGroup& operator=(ReplicaGroup&&) noexcept = default;

  std::size_t size() const { return replicas_.size(); }
  Placement const& placement() const { return placement_; }
  context_type context(std::size_t r) const { return placement_.context(r); }
  Model& replica(std::size_t r) { return *replicas_[r]; }
  /// Shared ownership of replica r, for a thread that may outlive a run (see StuckReplicas).
  std::shared_ptr<Model> const& handle(std::size_t r) const { return replicas_[r]; }
  Variables& variables(std::size_t r) { return replicas_[r]->variables(); }
  /// Where each replica's gradients are, by replica: during a lock-step run, the arena or where
  /// the model left them (GradientPlaces); settled into the arena when the run ends.
  std::span<GradientPlaces> gradient_places() { return places_; }
  /// Replica 0's Variables: names, shapes and offsets. A model need only offer a non-const
  /// variables(), which does not change it; the shared_ptr lets a const group call it.
  Variables const& layout() const { return replicas_[0]->variables(); }

  bool has_central() const { return !central_.empty(); }
  std::span<float> central() { return central_; }
  /// CentralStorage in lock step: every replica reads and writes the central copy itself.
  void bind_replicas_to_central() {
    for (auto& r : replicas_) r->variables().bind_weights(central_);
    bound_ = true;
  }

  optim::Optimizer const& optimizer() const { return optimizer_; }
  optim::OptimizerState& slots() { return slots_; }
  /// Replaces the optimizer and zeroes its slots.
  void set_optimizer(optim::Optimizer optimizer) {
    optimizer_ = optimizer;
    slots_ = optimizer.make_state(layout(), slot_memory());
  }
  /// Changes the optimizer's step size, keeping its slots. Safe from after_step during a run: the
  /// engines apply the optimizer either with every replica at rest in a barrier (lock step) or
  /// holding the gate shared, which this holds exclusively. Throws Error for a rate < 0 or not
  /// finite, changing nothing.
  void set_learning_rate(float rate) {
    std::unique_lock lock(*gate_);
    optimizer_.set_learning_rate(rate);
  }
  /// Throws Error when the slots do not fit the optimizer and the model (call before a run).
  void check_optimizer_state() const {
    bool fits = slots_.slots.size() == optimizer_.slot_names().size();
    for (auto const& slot : slots_.slots) fits = fits && slot.size() == layout().element_count();
    if (!fits) {
      throw Error("convoy: the optimizer state does not fit " + std::string(optimizer_.name()) +
                  " and the model's " + std::to_string(layout().element_count()) +
                  " weights; set it with set_optimizer()");
    }
  }

  Counters& counters() { return counters_; }
  Counters const& counters() const { return counters_; }
  /// The replicas the counters count: this group's, or every process's in a collective run
  /// (count_replicas), so that batches() and a snapshot's local steps cover the whole run.
  std::size_t counted_replicas() const { return counted_ != 0 ? counted_ : size(); }
  /// Counts `replicas` in all from now on, starting every local step at zero.
  void count_replicas(std::size_t replicas) {
    counted_ = replicas;
    counters_.local_steps.assign(replicas, 0);
  }

  /// Engines hold it shared while they change the weights and counters of a step that others may
  /// read; snapshot() and read_weights() hold it exclusively, so they see one consistent state.
  std::shared_mutex& gate() const { return *gate_; }
  /// False while replicas compute and draw from their generators concurrently with callbacks
  /// (asynchronous runs); snapshot() leaves the generators out then.
  void set_at_rest(bool at_rest) { at_rest_ = at_rest; }

  /// The authoritative weights (the central copy, or replica 0's), flat in layout order: device
  /// memory when replica 0's arenas are (Variables::arenas_on_device), which read_weights() copies.
  std::span<float const> weights() const {
    return has_central() ? std::span<float const>(central_) : layout().weights();
  }
  /// Copies the authoritative weights into `out` (element_count() floats). Safe from a callback.
  void read_weights(std::span<float> out) const {
    check_flat_size(out.size(), "read_weights");
    std::unique_lock lock(*gate_);
    settle();
    auto const w = weights();
    layout().copy(out.data(), w.data(), w.size());
  }
  /// The gradient arenas of replicas [0, count), each times `scale`, summed: the mean gradient that
  /// Strategy::get_gradients reports, with the scale each engine knows. Only while those replicas
  /// are at rest (between runs, or in a lock-step callback).
  std::vector<float> scaled_gradient_sum(std::size_t count, float scale) const {
    settle();
    std::vector<float> sum(layout().element_count(), 0.0f);
    std::vector<float> staged;  // a variable's gradient, from a device arena
    for (std::size_t r = 0; r < count; ++r) {
      auto const& places = places_[r];
      auto const& vars = replicas_[r]->variables();
      for (std::size_t v = 0; v < places.list().size(); ++v) {
        auto const& var = places.list()[v];
        float const* grad = places.of(v);
        if (vars.arenas_on_device()) {
          staged.resize(var.size);
          vars.copy(staged.data(), grad, var.size);
          grad = staged.data();
        }
        for (std::size_t i = 0; i < var.size; ++i) sum[var.offset + i] += grad[i] * scale;
      }
    }
    return sum;
  }
  /// Copies the central weights, when there are any, into every replica that keeps its own.
  void publish_central() {
    if (!has_central() || bound_) return;
    settle();
    for (auto& r : replicas_) {
      auto& vars = r->variables();
      vars.copy(vars.weights().data(), central_.data(), central_.size());
    }
  }

  /// Replica 0, with the authoritative weights (between runs).
  Model const& model() const { return *replicas_[0]; }

  /// Sets the weights of every replica and the central copy from `flat` (layout order). Throws
  /// ShapeError, changing nothing, when `flat` has another size.
  void assign_flat(std::span<float const> flat) {
    check_flat_size(flat.size(), "set_flat");
    settle();
    if (has_central()) std::ranges::copy(flat, central_.begin());
    if (bound_) return;
    for (auto& r : replicas_) {
      auto& vars = r->variables();
      vars.copy(vars.weights().data(), flat.data(), flat.size());
    }
  }
  /// Sets every variable by name in every replica and the central copy. Throws LoadError naming
  /// every unknown, missing and mis-shaped name; on error nothing changes.
  void set_weights(std::map<std::string, Tensor> const& named) {
    layout().check_names(named, "set_weights");
    std::vector<float> flat(layout().element_count());
    layout().assign_named(named, flat);
    assign_flat(flat);
  }

  /// The whole state by name. Generators are left out when taken while replicas compute.
  Snapshot snapshot() const {
    std::unique_lock lock(*gate_);
    settle();
    Snapshot s;
    s.weights = layout().named(weights());
    s.optimizer = std::string(optimizer_.name());
    s.slots = optim::named_slots(optimizer_, slots_, layout());
    s.optimizer_updates = slots_.updates;
    s.counters = counters_;
    // Generators only when the counters count exactly these replicas: in a run that spans
    // processes (count_replicas) the others' generators are not here, and a restore starts afresh.
    if (at_rest_ && counted_replicas() == size()) {
      for (auto const& r : replicas_) {
        std::ostringstream text;
        text << r->variables().rng();
        s.generators.push_back(text.str());
      }
    }
    return s;
  }

  /// Restores a snapshot (from this strategy or another with the same variables, any replica
  /// count). Checks everything first: throws LoadError naming unknown, missing and mis-shaped
  /// weights or slots, and Error for another optimizer, negative counters or a generator state
  /// that does not parse; on error nothing changes. Taken with another replica count, every
  /// replica continues at the mean local step (so the data consumed, in epochs, is kept) and the
  /// generators start afresh.
  void restore(Snapshot const& s) {
    auto unpacked = unpack(s, layout(), optimizer_, counted_replicas());
    std::vector<std::mt19937_64> generators;
    if (s.generators.size() == size()) {
      for (auto const& text : s.generators) {
        std::istringstream in(text);
        in >> generators.emplace_back();
        if (!in) throw Error("convoy: a generator state in the snapshot does not parse");
      }
    }
    // Nothing below throws but std::bad_alloc and a lost device's DeviceError.
    assign_flat(unpacked.weights);
    // Copied into place: the slots stay in the memory set_optimizer chose (a device context's).
    for (std::size_t slot = 0; slot < slots_.slots.size(); ++slot)
      std::ranges::copy(unpacked.slots.slots[slot], slots_.slots[slot].begin());
    slots_.updates = unpacked.slots.updates;
    counters_ = std::move(unpacked.counters);
    for (std::size_t r = 0; r < generators.size(); ++r) variables(r).rng() = generators[r];
  }

 private:
  // The central copy: heap memory aligned for the lock step's streaming stores, or the memory the
  // placement names (place::CentralStorageGpus: page-locked host memory its devices read).
  void allocate_central(std::size_t n) {
    if constexpr (has_central_memory<Placement>) {
      auto owner = std::make_shared<std::pmr::vector<float>>(n, 0.0f, placement_.central_memory());
      central_ = *owner;
      central_owner_ = std::move(owner);
    } else {
      auto owner = std::make_shared<convoy::detail::AlignedVector<float>>(n);
      central_ = *owner;
      central_owner_ = std::move(owner);
    }
  }

  // Waits for the work each replica's context has queued (a device's update is only queued), so
  // that the host may read and write what it wrote: the central copy, mapped arenas, the slots.
  void settle() const {
    for (std::size_t r = 0; r < replicas_.size(); ++r) settle_on_host(placement_.context(r));
  }

  // Where the optimizer's slots live: the memory of the context the replicas compute in.
  std::pmr::memory_resource* slot_memory() const {
    if constexpr (has_arena_memory<typename Placement::context_type>) {
      return placement_.context(0).memory();
    } else {
      return std::pmr::new_delete_resource();
    }
  }

  void check_flat_size(std::size_t size, char const* what) const {
    if (size != layout().element_count()) {
      throw ShapeError("convoy: " + std::string(what) + " got " + std::to_string(size) +
                       " values; the model '" + layout().scope() + "' holds " +
                       std::to_string(layout().element_count()));
    }
  }

  Placement placement_;
  std::vector<std::shared_ptr<Model>> replicas_;
  std::vector<GradientPlaces> places_;   // by replica; of the replicas' Variables, on the heap
  std::span<float> central_;             // empty: no central copy
  std::shared_ptr<void> central_owner_;  // keeps central_'s memory
  bool bound_ = false;
  bool at_rest_ = true;
  optim::Optimizer optimizer_{optim::Sgd{}};
  optim::OptimizerState slots_;
  Counters counters_;
  std::size_t counted_ = 0;  // 0: size()
  std::unique_ptr<std::shared_mutex> gate_ = std::make_unique<std::shared_mutex>();
};

}  // namespace convoy::comm
