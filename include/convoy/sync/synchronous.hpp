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
  int replicas_to_aggregate = 0;                       ///< 0: all replicas
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  ///< longest wait for the M-th gradient
  friend bool operator==(Synchronous const&, Synchronous const&) = default;
};
static_assert(synchronization_policy<Synchronous>);

}  // namespace convoy::sync
