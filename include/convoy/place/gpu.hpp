// place::Gpu: one replica on one GPU, by default the one whose ordinal is this process's local rank
// (one process per GPU). In a build with convoy::cuda the replica computes in exec::Cuda on that
// device, its arenas and the optimizer's slots in the device's memory. When the device cannot be
// had (a build without CUDA, no device, an ordinal past the last) the placement falls back to the
// host and says why in one line (TensorFlow's allow_soft_placement), or fails under `strict`.
#pragma once

#include <cstddef>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "../cluster/local_rank.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#if defined(CONVOY_WITH_CUDA)
#include "../exec/cuda.hpp"
#endif

namespace convoy::place {

struct Gpu {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Gpu";
  static constexpr bool shared_weights = false;
  /// CUDA device ordinal; -1: this process's local rank on its machine, as the cluster resolver
  /// reads it (convoy::local_rank(): LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
  /// SLURM_LOCALID; 0 under TF_CONFIG or alone).
  int device = -1;
  bool strict = false;  ///< true: throw PlacementError instead of falling back to the host
  bool log_placement = false;
  /// Set by the replica group before resolve() when the model cannot compute on a device
  /// (libtorch::Model, whose modules stay on the CPU): the reason resolve() gives for running on
  /// the host. Leave it empty.
  std::string host_only_because{};

  /// The device asked for: `device`, or the local rank when it is -1. Throws ClusterError when the
  /// launcher's local-rank variable is malformed.
  int ordinal() const { return device >= 0 ? device : local_rank(); }
  int replica_count() const { return 1; }

#if defined(CONVOY_WITH_CUDA)
  using context_type = exec::Cuda;
  /// Set by resolve(): the device's context, or one on the host after a fallback. Leave it empty.
  std::optional<exec::Cuda> resolved{};

  /// The execution context replica `r` computes in (the host until resolve() found the device).
  exec::Cuda context(std::size_t) const { return resolved ? *resolved : exec::Cuda::host(); }

  /// Called once when a strategy is built: opens the device, naming it under log_placement; when
  /// it is not there, says so in one line and computes on the host, or throws PlacementError under
  /// strict placement.
  void resolve() {
    int const gpu = ordinal();
    if (!host_only_because.empty()) {
      fall_back(gpu, host_only_because);
      resolved.emplace(exec::Cuda::host());
      return;
    }
    int const count = exec::cuda::device_count();
    if (gpu < count) {
      resolved.emplace(gpu);
      if (log_placement) {
        std::clog << "convoy placement: place::Gpu computes on "
                  << exec::cuda::describe(exec::cuda::device_info(gpu)) << "\n";
      }
      return;
    }
    std::string seen = "no device";
    if (count > 0) {
      seen = std::to_string(count) + " device" + (count == 1 ? "" : "s") + " (/gpu:0-" +
             std::to_string(count - 1) + ")";
    }
    fall_back(gpu, "the CUDA runtime sees " + seen);
    resolved.emplace(exec::Cuda::host());
  }

  /// Moves replica `r`'s arenas to the device (nothing on the host).
  void adopt(Variables& vars, std::size_t r) const { context(r).adopt(vars); }
#else
  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }

  /// Called once when a strategy is built: this build cannot honour the placement, so say so once
  /// and run on the host, or throw PlacementError under strict placement.
  void resolve() const {
    fall_back(ordinal(),
              host_only_because.empty() ? "this build has no CUDA backend" : host_only_because);
  }
#endif

  friend bool operator==(Gpu const&, Gpu const&) = default;

 private:
  void fall_back(int gpu, std::string const& why) const {
    std::string const what =
        "convoy: place::Gpu{device " + std::to_string(gpu) + "} cannot be honoured: " + why;
    if (strict) {
      throw PlacementError(what + " (strict placement); use place::Host, or turn strict off");
    }
    std::clog << what << "; running on the host (/cpu:0) instead\n";
  }
};
static_assert(placement_policy<Gpu>);

}  // namespace convoy::place
