// place::CentralStorage: one shared copy of the weights on the host; every replica computes its
// gradients against it (tf.distribute's CentralStorageStrategy). Only for one machine.
#pragma once

#include <cstddef>
#include <string_view>

#include "../core/concepts.hpp"
#include "../exec/host.hpp"
#include "host_threads.hpp"

namespace convoy::place {

struct CentralStorage {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "CentralStorage";
  static constexpr bool shared_weights = true;  ///< replicas read the one central copy
  int replicas = 0;                             ///< 0: one per CPU this process may use
  bool log_placement = false;

  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }
  int replica_count() const { return detail::replicas_or_one_per_core(replicas); }
  friend bool operator==(CentralStorage const&, CentralStorage const&) = default;
};
static_assert(placement_policy<CentralStorage>);

}  // namespace convoy::place
