// place::MirroredGpus: one replica per local GPU in one process (tf.distribute's MirroredStrategy
// over "/gpu:0", "/gpu:1", ...), each computing in exec::Cuda on its device with its own copy of
// every variable; comm::Nccl keeps the copies equal (NCCL group start-up, one communicator per
// device). Devices that are not there are left out with one line; with none, one replica
// computes on the host (TensorFlow's allow_soft_placement), or, under `strict`, PlacementError.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#if defined(CONVOY_WITH_CUDA)
#include "../exec/cuda.hpp"
#endif

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
    if (!resolved.empty()) return static_cast<int>(resolved.size());
    return std::max<int>(1, devices.empty() ? exec::cuda::device_count()
                                            : static_cast<int>(devices.size()));
  }
  exec::Cuda context(std::size_t r) const {
    return r < resolved.size() ? resolved[r] : exec::Cuda::host();
  }

  /// Called once when a strategy is built: opens every device asked for that the runtime sees,
  /// naming each under log_placement. Devices past the last are left out with one line (or
  /// PlacementError under strict); with none left, one replica computes on the host.
  void resolve() {
    int const count = exec::cuda::device_count();
    std::vector<int> asked = devices;
    if (asked.empty()) {
      for (int d = 0; d < count; ++d) asked.push_back(d);
    }
    std::vector<int> missing;
    resolved.clear();
    for (int d : asked) {
      if (d < 0 || d >= count) {
        missing.push_back(d);
        continue;
      }
      resolved.emplace_back(d);
      if (log_placement) {
        std::clog << "convoy placement: place::MirroredGpus replica " << resolved.size() - 1
                  << " computes on " << exec::cuda::describe(exec::cuda::device_info(d)) << "\n";
      }
    }
    std::string const seen = count == 0 ? std::string("no device")
                                        : std::to_string(count) + " device(s) (/gpu:0-" +
                                              std::to_string(count - 1) + ")";
    if (asked.empty() || !missing.empty()) {
      std::string what = "convoy: place::MirroredGpus{";
      for (std::size_t i = 0; i < missing.size(); ++i)
        what += (i == 0 ? "device " : ", ") + std::to_string(missing[i]);
      what += "} cannot be honoured: the CUDA runtime sees " + seen;
      if (strict) {
        throw PlacementError(what + " (strict placement); name the devices there are, or turn "
                                    "strict off");
      }
      std::clog << what
                << (resolved.empty() ? "; one replica runs on the host (/cpu:0) instead\n"
                                     : "; mirroring over the " + std::to_string(resolved.size()) +
                                           " that are there\n");
    }
    if (resolved.empty()) resolved.push_back(exec::Cuda::host());
  }

  /// Moves replica `r`'s arenas to its device (nothing on the host).
  void adopt(Variables& vars, std::size_t r) const { context(r).adopt(vars); }
#else
  using context_type = exec::Host;
  int replica_count() const { return 1; }
  exec::Host context(std::size_t) const { return {}; }

  /// Called once when a strategy is built: this build cannot honour the placement, so say so once
  /// and run one replica on the host, or throw PlacementError under strict placement.
  void resolve() const {
    std::string const what =
        "convoy: place::MirroredGpus cannot be honoured: this build has no CUDA backend";
    if (strict) throw PlacementError(what + " (strict placement); use place::Mirrored");
    std::clog << what << "; one replica runs on the host (/cpu:0) instead\n";
  }
#endif

  friend bool operator==(MirroredGpus const&, MirroredGpus const&) = default;
};
static_assert(placement_policy<MirroredGpus>);

}  // namespace convoy::place
