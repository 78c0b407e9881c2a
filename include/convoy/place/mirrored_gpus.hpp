// place::MirroredGpus: one replica per local GPU in one process (tf.distribute's MirroredStrategy
// over "/gpu:0", "/gpu:1", ...), each computing in exec::Cuda on its device with its own copy of
// every variable; comm::Nccl keeps the copies equal (NCCL group start-up, one communicator per
// device). Devices that are not there are left out with one line; with none, one replica
// computes on the host (TensorFlow's allow_soft_placement), or, under `strict`, PlacementError.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#include "local_gpus.hpp"

namespace convoy::place {

struct MirroredGpus {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "MirroredGpus";
  static constexpr bool shared_weights = false;
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
  /// Moves replica `r`'s arenas to its device (nothing on the host).
  void adopt(Variables& vars, std::size_t r) const { context(r).adopt(vars); }
#else
  using context_type = exec::Host;
  int replica_count() const { return 1; }
  exec::Host context(std::size_t) const { return {}; }
  /// Called once when a strategy is built: one line (this build has no CUDA backend), or
  /// PlacementError under strict placement.
  void resolve() const { detail::no_local_gpus(name, "Mirrored", strict); }
#endif

  friend bool operator==(MirroredGpus const&, MirroredGpus const&) = default;
};
static_assert(placement_policy<MirroredGpus>);

}  // namespace convoy::place
