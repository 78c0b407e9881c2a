// place::CentralStorageGpus: one copy of the weights in page-locked host memory, and one replica
// per local GPU computing its gradients against it (tf.distribute's CentralStorageStrategy with
// GPUs). Each replica's kernels read the central weights over the bus through the same pointer
// (mapped memory, unified addressing); the in-process engine sums the gradients and applies the
// optimizer to the central copy on the host, in lock step. Devices that are not there are left out
// with one line; with none, one replica computes on the host, or, under `strict`, PlacementError.
#pragma once

#include <cstddef>
#include <memory_resource>
#include <string_view>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#include "local_gpus.hpp"

namespace convoy::place {

struct CentralStorageGpus {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "CentralStorageGpus";
  static constexpr bool shared_weights = true;  ///< replicas read the one central copy
  std::vector<int> devices{};  ///< CUDA ordinals; empty: every device the runtime sees
  bool strict = false;         ///< true: PlacementError instead of leaving a device out
  bool log_placement = false;

#if defined(CONVOY_WITH_CUDA)
  using context_type = exec::Cuda;
  /// Set by resolve(): one context per replica. Leave it empty.
  std::vector<exec::Cuda> resolved{};

  /// One replica per device asked for (before resolve()), or per device found (after).
  int replica_count() const {
    return resolved.empty() ? detail::local_gpu_count(devices) : static_cast<int>(resolved.size());
  }
  exec::Cuda context(std::size_t r) const {
    return r < resolved.size() ? resolved[r] : exec::Cuda::host();
  }
  /// Called once when a strategy is built: opens every device asked for that the runtime sees
  /// (place/local_gpus.hpp).
  void resolve() { resolved = detail::open_local_gpus(name, devices, strict, log_placement); }
  /// Moves replica `r`'s arenas to page-locked host memory its device reads and writes over the
  /// bus (nothing on the host): the host sums the replicas' gradients there. Its weights are then
  /// bound to the central copy.
  void adopt(Variables& vars, std::size_t r) const { context(r).adopt_mapped(vars); }
  /// Where the central copy lives: page-locked host memory every device reads, or the heap after a
  /// fallback to the host.
  std::pmr::memory_resource* central_memory() const {
    return context(0).on_device() ? static_cast<std::pmr::memory_resource*>(exec::cuda::pinned_memory())
                                   : std::pmr::new_delete_resource();
  }
#else
  using context_type = exec::Host;
  int replica_count() const { return 1; }
  exec::Host context(std::size_t) const { return {}; }
  /// Called once when a strategy is built: one line (this build has no CUDA backend), or
  /// PlacementError under strict placement.
  void resolve() const { detail::no_local_gpus(name, "CentralStorage", strict); }
#endif

  friend bool operator==(CentralStorageGpus const&, CentralStorageGpus const&) = default;
};
static_assert(placement_policy<CentralStorageGpus>);

}  // namespace convoy::place
