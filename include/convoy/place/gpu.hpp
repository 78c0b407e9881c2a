// place::Gpu: one replica on one GPU. This build carries no CUDA backend yet, so the placement
// falls back to the host and says so once (TensorFlow's allow_soft_placement), or fails under
// `strict`.
#pragma once

#include <string_view>

#include "../core/concepts.hpp"

namespace convoy::place {

struct Gpu {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Gpu";
  static constexpr bool shared_weights = false;
  int device = 0;       ///< CUDA device ordinal
  bool strict = false;  ///< true: throw PlacementError instead of falling back to the host
  bool log_placement = false;

  int replica_count() const { return 1; }
  friend bool operator==(Gpu const&, Gpu const&) = default;
};
static_assert(placement_policy<Gpu>);

}  // namespace convoy::place
