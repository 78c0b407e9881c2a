// place::Gpu: one replica on one GPU, by default the one whose ordinal is this process's local rank
// (one process per GPU). The strategies' engines compute on the host so far, so the placement falls
// back to the host and says why in one line (TensorFlow's allow_soft_placement), or fails under
// `strict`. A build with convoy::cuda says which device it found, or that the runtime sees none;
// exec::Cuda (exec/cuda.hpp) is the device context a model computes in by hand meanwhile.
#pragma once

#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>

#include "../cluster/cluster.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../exec/host.hpp"
#if defined(CONVOY_WITH_CUDA)
#include "../exec/cuda.hpp"
#endif

namespace convoy::place {

namespace detail {

/// Why device `ordinal` cannot run a strategy's replica in this build.
inline std::string why_not_on_gpu(int ordinal) {
#if defined(CONVOY_WITH_CUDA)
  int const count = exec::cuda::device_count();
  if (ordinal >= count) {
    if (count == 0) return "the CUDA runtime sees no device";
    return "the CUDA runtime sees " + std::to_string(count) + " device" + (count == 1 ? "" : "s") +
           " (/gpu:0-" + std::to_string(count - 1) + ")";
  }
  return exec::cuda::describe(exec::cuda::device_info(ordinal)) +
         " is there, but the strategies' engines do not compute on devices yet";
#else
  (void)ordinal;
  return "this build has no CUDA backend";
#endif
}

}  // namespace detail

struct Gpu {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Gpu";
  static constexpr bool shared_weights = false;
  /// CUDA device ordinal; -1: this process's local rank on its machine, as the cluster resolver
  /// reads it (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID; 0 alone).
  int device = -1;
  bool strict = false;  ///< true: throw PlacementError instead of falling back to the host
  bool log_placement = false;

  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }
  int replica_count() const { return 1; }

  /// The device asked for: `device`, or the local rank when it is -1. Throws ClusterError when the
  /// launcher's variables are malformed.
  int ordinal() const { return device >= 0 ? device : Cluster::from_environment().local_rank; }

  /// Called once when a strategy is built: says in one line why the device is not used and that
  /// the replica runs on the host, or throws PlacementError under strict placement.
  void resolve() const {
    int const gpu = ordinal();
    std::string const what = "convoy: place::Gpu{device " + std::to_string(gpu) +
                             "} cannot be honoured: " + detail::why_not_on_gpu(gpu);
    if (strict) {
      throw PlacementError(what + " (strict placement); use place::Host, or turn strict off");
    }
    std::clog << what << "; running on the host (/cpu:0) instead\n";
  }
  friend bool operator==(Gpu const&, Gpu const&) = default;
};
static_assert(placement_policy<Gpu>);

}  // namespace convoy::place
