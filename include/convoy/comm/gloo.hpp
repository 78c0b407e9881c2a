// comm::Gloo: synchronous data-parallel training across processes and machines on CPUs, the
// collective engine (comm/buckets/collective_engine.hpp) over Gloo's allreduce on TCP, the library
// PyTorch and Horovod use on CPUs. One replica per process (place::Host, the DDP shape), replica
// threads (place::Mirrored), which sum in shared memory first so that one allreduce per bucket
// crosses the processes, or one GPU per process (place::Gpu), whose buckets go through page-locked
// host memory (comm/buckets/host_staged_exchange.hpp): for clusters without NCCL's network, and
// several processes on one GPU, which NCCL refuses. With sync::Synchronous the gradients are summed
// in buckets during the backward pass; with sync::BoundedStaleness<S> replicas step alone and
// average their weights every S+1 steps; sync::Asynchronous does not compile. The engine
// (comm/gloo/engine.hpp) comes with this header in a build that links convoy::gloo (docs/gloo.md).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "../cluster/cluster.hpp"
#include "../core/concepts.hpp"
#include "../place/gpu.hpp"
#include "../place/host.hpp"
#include "../place/mirrored.hpp"
#include "../sync/asynchronous.hpp"
#include "gloo_algorithm.hpp"

namespace convoy::comm {

// Not convoy::comm::gloo: inside namespace convoy::comm that would hide Gloo's own ::gloo.
namespace gloo_fabric {
/// comm::Gloo's engine: declared here, defined in comm/gloo/engine.hpp (convoy::gloo).
template <class Model, class Placement, class Sync>
class Engine;
}  // namespace gloo_fabric

struct Gloo {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "Gloo";
  static constexpr bool collective = true;  ///< every replica takes part in every exchange
  /// Sums on the host: place::Host, place::Mirrored, or place::Gpu staged through host memory.
  static constexpr bool host_collective = true;

  /// Which of Gloo's allreduce algorithms sums a bucket (comm/gloo_algorithm.hpp).
  using Algorithm = GlooAlgorithm;

  /// This process's cluster; empty: resolved from the environment, every rank of a rank launcher
  /// a worker unless CONVOY_PS_TASKS says otherwise (Cluster::from_environment(all_workers)).
  /// Its worker 0 serves the rendezvous at its address (comm/bootstrap/rendezvous.hpp).
  std::optional<Cluster> cluster{};
  /// Gradients per allreduce: a bucket starts as soon as the backward pass has finished it.
  std::size_t bucket_bytes = std::size_t{4} << 20;
  /// How long one bucket's exchange may take before the run stops with an error naming who is
  /// missing.
  std::chrono::milliseconds timeout{std::chrono::minutes(1)};
  /// How long the processes wait for one another to meet.
  std::chrono::milliseconds bootstrap_timeout{std::chrono::minutes(2)};
  /// A process lost mid-run (its connections closed, or it stopped answering for `timeout`): the
  /// others regroup without it and go on from the last step every one of them applied, as long as
  /// they are more than half of the last group (or exactly half with its rank 0) and at least
  /// `min_workers` (docs/gloo.md, "When a process is lost"). With fail_fast, every process ends
  /// with an error naming the lost one instead.
  bool fail_fast = false;
  std::size_t min_workers = 1;
  /// A worker started again (tools/convoy-launch --max-restarts sets CONVOY_RESTART) asks the
  /// group to take it in; it is taken in at the next step boundary, with the state of the member
  /// furthest on, while the group has fewer than max_workers (0: every worker of the cluster).
  std::size_t max_workers = 0;
  /// The run starts once this many of the cluster's workers have met, worker 0 among them, and a
  /// last call of two seconds has passed with no other; the others, started later, join it at a
  /// step boundary as a worker started again does, up to max_workers (docs/gloo.md, "Starting
  /// with the workers that are there"). 0: every worker of the cluster meets before any trains.
  std::size_t start_workers = 0;
  /// The address Gloo's TCP connections listen on; empty: this task's host in the cluster.
  std::string host{};
  /// A network interface to listen on instead ("eth0"), which Gloo resolves to its address.
  std::string interface {};
  Algorithm algorithm = Algorithm::automatic;
  /// Gloo's TCP transport is neither authenticated nor encrypted: a non-loopback address is
  /// refused unless this is set (a trusted network only; docs/operators.md).
  bool allow_plaintext = false;
  /// Before a group trains, its processes compare each Gloo connection's two ends, so that one a
  /// stranger took first is found and the group connects again (docs/gloo.md, "A stranger on a
  /// Gloo pair's port"). Where address translation sits between the workers the two ends never
  /// match: set false there.
  bool check_connection_ends = true;

  template <class Model, class Placement, class Sync>
  using engine = gloo_fabric::Engine<Model, Placement, Sync>;

  /// Gloo's own words for a pairing it cannot run (comm/engine.hpp, speaks_for_pairing): the
  /// Sync and placements of a collective on the host, and the component its engine needs. One
  /// message at a time: each rule assumes the ones above it hold.
  template <class Model, class Placement, class Sync>
  static constexpr bool pairs_with() {
    constexpr bool synchronous_enough = !std::same_as<Sync, sync::Asynchronous>;
    constexpr bool on_the_host = std::same_as<Placement, place::Host> ||
                                 std::same_as<Placement, place::Mirrored> ||
                                 std::same_as<Placement, place::Gpu>;
    static_assert(synchronous_enough,
                  "convoy: comm::Gloo cannot run sync::Asynchronous (an allreduce needs every "
                  "replica of every process in every exchange); use sync::Synchronous for a "
                  "bucketed allreduce of the gradients, sync::BoundedStaleness<S> for an allreduce "
                  "of the weights every S+1 steps, or comm::ZmqPs with place::Sharded for "
                  "asynchronous training across processes.");
    static_assert(!synchronous_enough || on_the_host,
                  "convoy: comm::Gloo keeps the replicas equal on the host, with no central copy: "
                  "place it with place::Host (one replica per process) or place::Mirrored (replica "
                  "threads per process), or place::Gpu (one GPU per process, its buckets through "
                  "host memory); on several GPUs of a process use comm::Nccl, and for one central "
                  "copy place::CentralStorage with comm::InProcess.");
    static_assert(
        !synchronous_enough || !on_the_host ||
            requires { sizeof(gloo_fabric::Engine<Model, Placement, Sync>); },
        "convoy: comm::Gloo's engine needs convoy::gloo (link it; Debian's libgloo-dev), "
        "with which <convoy/comm/gloo.hpp> brings it (docs/gloo.md).");
    return true;
  }
};
static_assert(communication_policy<Gloo>);

}  // namespace convoy::comm

#if defined(CONVOY_WITH_GLOO)
#include "gloo/engine.hpp"
#endif
