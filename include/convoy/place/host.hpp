// place::Host: one replica on the host processor, the reference every other placement is measured
// against.
#pragma once

#include <cstddef>
#include <string_view>

#include "../core/concepts.hpp"
#include "../exec/host.hpp"

namespace convoy::place {

struct Host {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Host";
  static constexpr bool shared_weights = false;  ///< replicas hold their own weights
  bool log_placement = false;  ///< print where each variable lives and who computes

  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }
  int replica_count() const { return 1; }
  friend bool operator==(Host const&, Host const&) = default;
};
static_assert(placement_policy<Host>);

}  // namespace convoy::place
