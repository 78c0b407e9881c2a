// Strategy<Model, Placement, Communication, Synchronization>: the composed type a user picks. It
// owns the engine its Communication policy brings and forwards to it; all the rules about which
// policies go together live here, as static_asserts that say what is wrong and what to write
// instead, so DESIGN's compatibility table can be read off this one file.
#pragma once

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory_resource>
#include <ostream>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/engine.hpp"
#include "comm/in_process.hpp"
#include "core/concepts.hpp"
#include "core/error.hpp"
#include "core/snapshot.hpp"
#include "io/checkpoint.hpp"
#include "math/blas_kernels.hpp"
#include "optim/optimizer.hpp"
#include "place/central_storage.hpp"
#include "place/central_storage_gpus.hpp"
#include "place/gpu.hpp"
#include "place/host.hpp"
#include "place/mirrored.hpp"
#include "place/mirrored_gpus.hpp"
#include "place/sharded_fwd.hpp"  // named by the rules below, defined with comm/zmq_ps.hpp
#include "sync/asynchronous.hpp"
#include "sync/bounded_staleness.hpp"
#include "sync/synchronous.hpp"
#include "train/step.hpp"

namespace convoy {

namespace detail {
template <class P>
inline constexpr bool is_single_replica =
    std::same_as<P, place::Host> || std::same_as<P, place::Gpu>;
template <class P>
inline constexpr bool is_sharded = false;
template <class Rule>
inline constexpr bool is_sharded<place::Sharded<Rule>> = true;
/// A Comm that keeps the variables on parameter-server shards says so (comm::ZmqPs).
template <class C>
concept serves_shards = requires {
  requires C::serves_shards;
};
/// A Comm whose replicas exchange through collectives, every replica in every exchange
/// (comm::Nccl).
template <class C>
concept collective = requires {
  requires C::collective;
};
/// A collective whose replicas compute on the host, across processes (comm::Gloo).
template <class C>
concept host_collective = collective<C> && requires {
  requires C::host_collective;
};

// The engine Comm brings, or an empty stand-in while a static_assert below reports a policy in the
// wrong slot or an engine not defined in this build (so that the message is the only error).
struct no_engine {};
template <class M, class P, class C, class S>
struct engine_of {
  using type = no_engine;
};
template <class M, class P, class C, class S>
requires communication_policy<C> && requires { sizeof(typename C::template engine<M, P, S>); }
struct engine_of<M, P, C, S> {
  using type = typename C::template engine<M, P, S>;
};
struct no_engine_of {
  using type = no_engine;
};
// A Comm's own pairing rules (speaks_for_pairing), instantiated; true for a Comm without them.
template <class C, class M, class P, class S>
constexpr bool comm_accepts() {
  if constexpr (speaks_for_pairing<C, M, P, S>) {
    return C::template pairs_with<M, P, S>();
  } else {
    return true;
  }
}

}  // namespace detail

/// A model distributed by a placement, a communication and a synchronization policy. Owns the
/// replicas (copies of the model it is given) and their weights. Not thread-safe: one driver at a
/// time calls run().
template <class Model, class Placement, class Comm, class Sync>
class Strategy {
  // The model, one requirement at a time, each printing the signature to write and where the
  // contract is written down with a worked example.
  static_assert(has_variables<Model>,
                "convoy: a Model needs 'convoy::Variables& variables()' returning the Variables "
                "that hold its weights; see examples/04_own_model and docs/own_model.md.");
  static_assert(has_forward_backward<Model>,
                "convoy: a Model needs 'float forward_backward(convoy::Batch const&)' that returns "
                "the batch's mean loss and overwrites every gradient; see examples/04_own_model "
                "and docs/own_model.md.");
  static_assert(replicable<Model>,
                "convoy: a Model must be copy-constructible: replicas are copies of the model "
                "given to the Strategy; see docs/own_model.md.");
  // Each policy in its slot. A place::Sharded that is only declared (no comm/zmq_ps.hpp) is left to
  // the pairing rule below, whose message names the header.
  static_assert(
      placement_policy<Placement> || detail::is_sharded<Placement>,
      "convoy: Strategy's second argument must be a placement policy: place::Host, place::Gpu, "
      "place::Mirrored, place::MirroredGpus, place::CentralStorage, place::CentralStorageGpus or "
      "place::Sharded<Rule>.");
  static_assert(
      !placement_policy<Placement> || gives_contexts<Placement>,
      "convoy: a placement policy needs 'context_type', 'context_type context(std::size_t "
      "replica) const' and 'int replica_count() const'; see place/mirrored.hpp.");
  static_assert(
      communication_policy<Comm>,
      "convoy: Strategy's third argument must be a communication policy: comm::InProcess, "
      "comm::ZmqPs (convoy/comm/zmq_ps.hpp), comm::Gloo (convoy/comm/gloo.hpp) or comm::Nccl "
      "(convoy/comm/nccl.hpp).");
  static_assert(
      synchronization_policy<Sync>,
      "convoy: Strategy's fourth argument must be a synchronization policy: sync::Synchronous, "
      "sync::Asynchronous or sync::BoundedStaleness<S>.");
  static_assert(!synchronization_policy<Sync> || gives_rules<Sync>,
                "convoy: a synchronization policy needs 'rules_type make_rules(convoy::Counters "
                "const&) const', 'void check(std::size_t replicas) const', 'bool "
                "continue_after_error() const' and a 'timeout'; see sync/asynchronous.hpp.");
  // Forbidden pairs.
  static_assert(!(detail::is_single_replica<Placement> && !std::same_as<Sync, sync::Synchronous> &&
                  !detail::host_collective<Comm>),
                "convoy: place::Host and place::Gpu run one replica, which has nobody to be "
                "asynchronous with; "
                "use place::Mirrored or place::CentralStorage with sync::Asynchronous or "
                "sync::BoundedStaleness<S>, or sync::Synchronous with one replica (or "
                "comm::Gloo, whose replicas are other processes).");

  static_assert(!detail::is_sharded<Placement> || detail::serves_shards<Comm>,
                "convoy: place::Sharded<Rule> spreads the variables over parameter-server shards, "
                "which only comm::ZmqPs (convoy/comm/zmq_ps.hpp) has; on one machine use "
                "place::Mirrored or place::CentralStorage with comm::InProcess.");
  // A Comm's own words for a pairing it cannot run, where it gives them (comm/engine.hpp,
  // speaks_for_pairing): its static_asserts fire here. For the others, the rules speak of what the
  // Comm can do.
  static constexpr bool own_words = speaks_for_pairing<Comm, Model, Placement, Sync>;
  static_assert(detail::comm_accepts<Comm, Model, Placement, Sync>());
  static constexpr bool collective_asynchronous =
      detail::collective<Comm> && std::same_as<Sync, sync::Asynchronous>;
  static_assert(own_words || !collective_asynchronous,
                "convoy: a collective Comm (collective = true: every replica takes part in every "
                "exchange) cannot run sync::Asynchronous; use sync::Synchronous for a bucketed "
                "allreduce of the gradients, sync::BoundedStaleness<S> for an allreduce of the "
                "weights every S+1 steps, or comm::ZmqPs with place::Sharded for asynchronous "
                "training across processes.");
  static constexpr bool host_collective_misplaced =
      detail::host_collective<Comm> && !collective_asynchronous &&
      !(std::same_as<Placement, place::Host> || std::same_as<Placement, place::Mirrored> ||
        std::same_as<Placement, place::Gpu>);
  static_assert(own_words || !host_collective_misplaced,
                "convoy: a collective Comm on the host (host_collective = true) keeps the replicas "
                "equal, with no central copy: place it with place::Host (one replica per process) "
                "or place::Mirrored (replica threads per process), or place::Gpu (one GPU per "
                "process); for one central copy use place::CentralStorage with comm::InProcess.");
  static_assert(!std::same_as<Placement, place::MirroredGpus> ||
                    (detail::collective<Comm> && !detail::host_collective<Comm>),
                "convoy: place::MirroredGpus keeps one replica per GPU, which comm::Nccl "
                "(convoy/comm/nccl.hpp) keeps equal with NCCL collectives; use comm::Nccl, or "
                "place::Mirrored with comm::InProcess on the host.");
  static_assert(!std::same_as<Placement, place::CentralStorageGpus> ||
                    detail::host_collective<Comm> ||
                    (!detail::collective<Comm> && !detail::serves_shards<Comm>),
                "convoy: place::CentralStorageGpus keeps one copy of the weights in host memory, "
                "which comm::InProcess sums into and serves to the GPU replicas; with comm::Nccl "
                "every GPU keeps its own copy: use place::MirroredGpus there.");
  static_assert(!detail::serves_shards<Comm> || detail::is_sharded<Placement>,
                "convoy: comm::ZmqPs keeps the variables on parameter-server shards; place them "
                "with place::Sharded<place::GreedyBySize> (or RoundRobin, or Partitioned).");

 public:
  using model_type = Model;
  using placement_type = Placement;
  using comm_type = Comm;
  using sync_type = Sync;
  // A placement only a Comm that serves shards can hold, or such a Comm without it: the engine is
  // not even looked at, since building it would fail on the placement (incomplete without
  // <convoy/comm/zmq_ps.hpp>) with errors after the static_assert's message.
  static constexpr bool shards_agree = detail::is_sharded<Placement> == detail::serves_shards<Comm>;
  using engine_type =
      typename std::conditional_t<shards_agree, detail::engine_of<Model, Placement, Comm, Sync>,
                                  detail::no_engine_of>::type;
  using placement_argument = std::conditional_t<shards_agree, Placement, detail::no_engine>;
  static_assert(own_words || !communication_policy<Comm> || !shards_agree ||
                    collective_asynchronous || host_collective_misplaced || engine<engine_type>,
                "convoy: a communication policy needs 'template <class Model, class Placement, "
                "class Sync> using engine = ...' naming an engine with run(plan), lock_step() and "
                "state() (see comm/engine.hpp); see comm/in_process.hpp.");

  /// Builds the engine its Comm brings, with replicas that are copies of `prototype` (so all start
  /// with its weights; each replica's generator is reseeded apart from the others). Throws
  /// PlacementError when a strict placement cannot be honoured, and Error for a policy knob out of
  /// range (replicas_to_aggregate, a timeout).
  explicit Strategy(Model prototype, placement_argument placement = {}, Comm comm = {},
                    Sync sync = {}) requires shards_agree
      : engine_(std::move(prototype), placement, comm, sync) {
    // The host's GEMM kernels are chosen here, on the thread that builds the strategy, before its
    // replica threads run: the choice switches OpenBLAS for the whole process and briefly sets a
    // variable of the environment (math/blas_kernels.hpp), which no other thread may then read.
    static_cast<void>(math::host_blas_kernels());
    if constexpr (asks_placement_log<Placement>) {
      if (placement.log_placement) log_placement(std::clog);
    }
  }

  // The pair the static_assert above refuses: taken as it is, so that its message is the only
  // error (the placement may be an incomplete type there, which not even the constructor above
  // may name: GCC reads its default argument before its constraint).
  template <class... Rest>
  explicit Strategy(Model, Rest&&...) requires(!shards_agree) {}

  Strategy(Strategy const&) = delete;
  Strategy& operator=(Strategy const&) = delete;
  Strategy(Strategy&&) noexcept = default;
  Strategy& operator=(Strategy&&) noexcept = default;

  engine_type& engine() { return engine_; }
  /// Whether this task writes checkpoints: always in one process; in a cluster, the chief only.
  bool chief() const {
    if constexpr (has_chief<engine_type>) {
      return engine_.chief();
    } else {
      return true;
    }
  }
  /// Whether after_step hears of every update (one process), or only of this task's own (a
  /// cluster's worker).
  bool sees_every_update() const {
    if constexpr (may_miss_updates<engine_type>) {
      return engine_.sees_every_update();
    } else {
      return true;
    }
  }
  /// Whether run() serves others instead of training (a cluster's ps task).
  bool serves() const {
    if constexpr (may_serve<engine_type>) {
      return engine_.serves();
    } else {
      return false;
    }
  }
  std::size_t replicas() const { return engine_.state().size(); }
  /// The replicas the data's plan is made for: replicas(), or, in a collective run whose group
  /// changed before this process joined it (comm::Gloo), those of the group the run started with.
  std::size_t planned_replicas() const {
    if constexpr (requires { engine_.state().planned_replicas(); }) {
      return engine_.state().planned_replicas();
    } else {
      return replicas();
    }
  }
  /// Where replica `replica`'s batches are best gathered (io::BatchBuffer): page-locked host memory
  /// when it computes on a GPU, so that its copy to the device is a DMA; the heap otherwise.
  std::pmr::memory_resource* batch_memory(std::size_t replica) const {
    if constexpr (gives_replica_contexts<engine_type>) {
      using context = std::remove_cvref_t<decltype(engine_.context(replica))>;
      if constexpr (has_batch_memory<context>) return engine_.context(replica).batch_memory();
    }
    return std::pmr::new_delete_resource();
  }
  /// Whether replica `replica` computes on a device (a GPU placement that found its device).
  bool on_device(std::size_t replica) const {
    if constexpr (gives_replica_contexts<engine_type>) {
      using context = std::remove_cvref_t<decltype(engine_.context(replica))>;
      if constexpr (may_compute_on_device<context>) return engine_.context(replica).on_device();
    }
    return false;
  }
  /// True when every replica takes every step together (one replica, or Synchronous aggregating
  /// all): a callback then sees every replica at rest.
  bool lock_step() const { return engine_.lock_step(); }

  /// Replaces the optimizer and zeroes its slots.
  void set_optimizer(optim::Optimizer optimizer) { engine_.state().set_optimizer(optimizer); }
  optim::Optimizer const& optimizer() const { return engine_.state().optimizer(); }
  /// Changes the optimizer's learning rate for the steps that follow, keeping its slots: between
  /// runs, or from a callback (after_step) during one. Throws Error for a rate < 0 or not finite,
  /// and for a Comm whose optimizer runs elsewhere (comm::ZmqPs: the shards apply the updates with
  /// the settings they were started with).
  void set_learning_rate(float rate) {
    if constexpr (adjusts_learning_rate<engine_type>) {
      engine_.state().set_learning_rate(rate);
    } else {
      throw Error("convoy: Strategy::set_learning_rate cannot change the learning rate under " +
                  std::string(Comm::name) +
                  ", whose optimizer runs on other tasks; give the rate in the optimizer instead");
    }
  }

  /// Runs steps until a goal of `plan` is reached; blocks. See the engine's run() for errors
  /// (comm/in_process/engine.hpp). Throws Error before starting for a plan without a goal or a
  /// batch function, or an optimizer state that does not fit.
  void run(RunPlan const& plan) {
    if (plan.until <= 0 && plan.until_batches <= 0) {
      throw Error("convoy: a RunPlan needs a goal: until (global steps) or until_batches > 0");
    }
    if (!plan.batch) throw Error("convoy: a RunPlan needs a batch function");
    running_ = true;
    struct Done {
      bool& running;
      ~Done() { running = false; }
    } const done{running_};
    engine_.run(plan);
  }

  /// Counters: global step, applied and dropped gradients, each replica's local step.
  Counters const& counters() const { return engine_.state().counters(); }
  std::int64_t global_step() const { return counters().global_step; }

  /// The whole state by name; consistent even from a callback during a run.
  Snapshot snapshot() const { return engine_.state().snapshot(); }
  /// Restores a snapshot; checks everything first (see ReplicaGroup::restore).
  void restore(Snapshot const& snapshot) { engine_.state().restore(snapshot); }

  /// Writes a checkpoint of the whole state with the data order's seed into `dir`, atomically;
  /// returns its path. In a cluster the shards write their own parts, committed by the chief's
  /// manifest. Blocks while writing (in asynchronous runs every replica that finishes a step
  /// meanwhile waits for it).
  std::filesystem::path save_checkpoint(std::filesystem::path const& dir, std::uint64_t data_seed) {
    if constexpr (writes_own_checkpoint<engine_type>) {
      return engine_.state().save_checkpoint(dir, data_seed);
    } else {
      return io::save_checkpoint(dir, io::Checkpoint{snapshot(), data_seed});
    }
  }

  /// Variable names, shapes and offsets of the flat weights.
  Variables const& layout() const { return engine_.state().layout(); }
  /// The authoritative weights, flat in layout order. Safe from a callback.
  std::vector<float> weights() const {
    std::vector<float> out(layout().element_count());
    read_weights(out);
    return out;
  }
  /// The same into `out` (element_count() floats), without allocating. Throws ShapeError for
  /// another size.
  void read_weights(std::span<float> out) const { engine_.state().read_weights(out); }
  /// Every variable by name (the Ray text's get_weights()).
  std::map<std::string, Tensor> get_weights() const { return layout().named(weights()); }
  /// The gradients of the last update by name: the mean over the replicas of the gradient each
  /// computed for its last batch, which is what the optimizer applied (zeros before the first
  /// step). Only in lock step (lock_step()), where every replica is at rest between runs and in a
  /// callback; empty otherwise, where replicas compute on while others apply (asynchronous) or the
  /// gradients live in other processes (comm::ZmqPs). Under a collective (comm::Nccl) the mean is
  /// over every replica of the run; with BoundedStaleness<S> there, over this process's replicas.
  std::map<std::string, Tensor> get_gradients() const {
    if constexpr (gives_mean_gradients<engine_type>) {
      auto const mean = engine_.mean_gradients();
      if (mean.empty()) return {};
      return layout().named(mean);
    } else {
      return {};
    }
  }
  /// Sets every variable by name in every replica and the central copy, checking all names and
  /// shapes first (LoadError lists the offenders; nothing changes then). Not during a run.
  void set_weights(std::map<std::string, Tensor> const& named) {
    refuse_during_run("set_weights");
    engine_.state().set_weights(named);
  }

  /// Replica 0, holding the authoritative weights, read-only: for evaluation and inspection
  /// between runs. Throws Error during a run (from a callback), where replica 0 may be computing;
  /// read weights() there instead. Write weights with set_weights(). On a GPU its arenas are
  /// device memory (Variables::arenas_on_device): read them through get_weights() or get_flat(),
  /// or a copy of the model, not through the spans of weights() and value().
  Model const& model() const {
    refuse_during_run("model()");
    return engine_.state().model();
  }

  /// Prints, like TensorFlow's log_device_placement, where every variable lives and which replica
  /// computes on which device, then which GEMM kernels the host's BLAS runs and who chose them
  /// (selecting them first, math::host_blas_kernels()).
  void log_placement(std::ostream& out) const {
    engine_.log_placement(out, Comm::name);
    out << "convoy placement: host math: " << math::host_blas_kernels().describe() << "\n";
  }

 private:
  void refuse_during_run(char const* what) const {
    if (running_) {
      throw Error("convoy: Strategy::" + std::string(what) +
                  " was called during a run, while replica 0 may be computing; use weights() or "
                  "Trainer::evaluate in a callback");
    }
  }

  engine_type engine_;
  bool running_ = false;
};

}  // namespace convoy
