// comm::Nccl: replicas on CUDA devices exchange through NCCL collectives, one process per device
// or a group of devices in one process. With sync::Synchronous the gradients are summed in buckets
// during the backward pass; with sync::BoundedStaleness<S> replicas step alone and average their
// weights every S+1 steps; sync::Asynchronous does not compile. The pieces are in comm/nccl/ (the
// communicator, the unique-id bootstrap, the bucket exchange) and comm/buckets/; the engine that
// puts them into a Strategy (comm/nccl/engine.hpp) comes with this header in a build that has
// both convoy::nccl and convoy::cuda (docs/nccl.md).
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string_view>

#include "../cluster/cluster.hpp"
#include "../core/concepts.hpp"
#include "../place/central_storage_gpus.hpp"
#include "../sync/asynchronous.hpp"

namespace convoy::comm {

namespace nccl {
/// comm::Nccl's engine: declared here, defined in comm/nccl/engine.hpp (convoy::nccl and
/// convoy::cuda).
template <class Model, class Placement, class Sync>
class Engine;
}  // namespace nccl

struct Nccl {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "Nccl";
  static constexpr bool collective = true;  ///< every replica takes part in every exchange
  /// This process's cluster; empty: resolved from the environment, every rank of a rank launcher
  /// a worker unless CONVOY_PS_TASKS says otherwise (Cluster::from_environment(all_workers)).
  /// Its worker 0 serves the NCCL unique id at its address (comm/nccl/unique_id_bootstrap.hpp).
  std::optional<Cluster> cluster{};
  /// Gradients per allreduce: a bucket starts as soon as the backward pass has finished it.
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// How long a collective may take before the communicator is aborted and the run stops.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// How long the ranks wait for one another to share the unique id.
  std::chrono::milliseconds bootstrap_timeout{std::chrono::minutes(2)};

  template <class Model, class Placement, class Sync>
  using engine = nccl::Engine<Model, Placement, Sync>;

  /// NCCL's own words for a pairing it cannot run (comm/engine.hpp, speaks_for_pairing): the Sync
  /// of a collective, and the components its engine needs. place::CentralStorageGpus is refused
  /// by the placement's own rule (strategy.hpp), which says what to use instead.
  template <class Model, class Placement, class Sync>
  static constexpr bool pairs_with() {
    constexpr bool synchronous_enough = !std::same_as<Sync, sync::Asynchronous>;
    static_assert(synchronous_enough,
                  "convoy: comm::Nccl cannot run sync::Asynchronous (a collective needs every "
                  "replica in every exchange); use sync::Synchronous for a bucketed allreduce of "
                  "the gradients, sync::BoundedStaleness<S> for an allreduce of the weights every "
                  "S+1 steps, or comm::ZmqPs with place::Sharded for asynchronous training.");
    static_assert(
        !synchronous_enough || std::same_as<Placement, place::CentralStorageGpus> ||
            requires { sizeof(nccl::Engine<Model, Placement, Sync>); },
        "convoy: comm::Nccl's engine runs on CUDA devices: it needs convoy::nccl and "
        "convoy::cuda (a file compiled by nvcc), where <convoy/comm/nccl.hpp> brings it "
        "(docs/nccl.md). On the host, use comm::InProcess.");
    return true;
  }
};
static_assert(communication_policy<Nccl>);

}  // namespace convoy::comm

#if defined(CONVOY_WITH_NCCL) && defined(CONVOY_WITH_CUDA)
#include "nccl/engine.hpp"
#endif
