// sync::Synchronous: every step applies one update built from the replicas' gradients. With
// replicas_to_aggregate M below the replica count, a step goes ahead with the first M gradients and
// late ones are dropped and counted, so a slow replica does not stall the others.
#pragma once

#include <chrono>
#include <string_view>

#include "../core/concepts.hpp"

namespace convoy::sync {

struct Synchronous {
  using policy_category = synchronization_tag;
  static constexpr std::string_view name = "Synchronous";
  int replicas_to_aggregate = 0;  ///< 0: all replicas
  /// With M < replicas: the longest wait for the M-th gradient before a TimeoutError naming the
  /// replicas that have not delivered. With every replica aggregated: how long a replica waits at a
  /// step before it names, on std::clog, the replicas it is waiting for (repeated each period).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  friend bool operator==(Synchronous const&, Synchronous const&) = default;
};
static_assert(synchronization_policy<Synchronous>);

}  // namespace convoy::sync
