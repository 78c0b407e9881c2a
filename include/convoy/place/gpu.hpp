// place::Gpu: one replica on one GPU. This build carries no CUDA backend yet, so the placement
// falls back to the host and says so once (TensorFlow's allow_soft_placement), or fails under
// `strict`.
#pragma once

#include <cstddef>
#include <iostream>
#include <string>
#include <string_view>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../exec/host.hpp"

namespace convoy::place {

struct Gpu {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Gpu";
  static constexpr bool shared_weights = false;
  int device = 0;       ///< CUDA device ordinal
  bool strict = false;  ///< true: throw PlacementError instead of falling back to the host
  bool log_placement = false;

  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }
  int replica_count() const { return 1; }

  /// Called once when a strategy is built: the device cannot be honoured in this build, so say so
  /// once and run on the host, or throw PlacementError under strict placement.
  void resolve() const {
    std::string const what = "convoy: place::Gpu{device " + std::to_string(device) +
                              "} cannot be honoured: this build has no CUDA backend";
    if (strict) {
      throw PlacementError(what + " (strict placement); use place::Host, or turn strict off");
    }
    std::clog << what << "; running on the host (/cpu:0) instead\n";
  }
  friend bool operator==(Gpu const&, Gpu const&) = default;
};
static_assert(placement_policy<Gpu>);

}  // namespace convoy::place
