// sync::BoundedStaleness<S>: asynchronous updates, but each replica keeps a clock (its completed
// steps) and waits before a step that would put it more than S clocks ahead of the slowest replica.
#pragma once

#include <chrono>
#include <string_view>

#include "../core/concepts.hpp"

namespace convoy::sync {

template <int S>
struct BoundedStaleness {
  static_assert(S >= 0, "convoy: BoundedStaleness<S> needs S >= 0 (S = 0 is lock-step)");
  using policy_category = synchronization_tag;
  static constexpr std::string_view name = "BoundedStaleness";
  static constexpr int staleness = S;
  std::chrono::milliseconds timeout{
      std::chrono::minutes(5)};  ///< longest wait for the slowest replica
  friend bool operator==(BoundedStaleness const&, BoundedStaleness const&) = default;
};
static_assert(synchronization_policy<BoundedStaleness<2>>);

}  // namespace convoy::sync
