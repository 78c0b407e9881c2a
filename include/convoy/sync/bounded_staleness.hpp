// sync::BoundedStaleness<S>: asynchronous updates, but each replica keeps a clock (its applied
// steps) and waits before a step that would put it more than S clocks ahead of the slowest replica.
#pragma once

#include <chrono>
#include <cstddef>
#include <string_view>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "clock_table.hpp"

namespace convoy::sync {

template <int S>
struct BoundedStaleness {
  static_assert(S >= 0, "convoy: BoundedStaleness<S> needs S >= 0 (S = 0 is lock-step)");
  using policy_category = synchronization_tag;
  using rules_type = ClockTable;
  static constexpr std::string_view name = "BoundedStaleness";
  static constexpr int staleness = S;
  /// The longest a replica may take over one step or wait for the slowest; past it, run() throws
  /// a TimeoutError naming the replica.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};

  void check(std::size_t) const { check_timeout(name, timeout); }
  ClockTable make_rules(Counters const& c) const { return ClockTable(c.local_steps, S); }
  bool continue_after_error() const { return false; }
  friend bool operator==(BoundedStaleness const&, BoundedStaleness const&) = default;
};
static_assert(synchronization_policy<BoundedStaleness<2>>);

}  // namespace convoy::sync
