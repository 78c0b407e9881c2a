// sync::Asynchronous: each replica applies its own gradients to the shared weights as soon as they
// are ready; the global step is the sum of all replicas' steps. A replica that fails is logged and
// the others train to the end, unless stop_on_error is set.
#pragma once

#include <chrono>
#include <cstddef>
#include <string_view>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "apply_at_once.hpp"

namespace convoy::sync {

struct Asynchronous {
  using policy_category = synchronization_tag;
  using rules_type = ApplyAtOnce;
  static constexpr std::string_view name = "Asynchronous";
  /// The longest a replica may take over one step; past it, run() throws a TimeoutError naming it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// false: a replica that throws is logged, the others carry on, and run() reports the failed
  /// replicas at the end (ReplicaError); true: the first error ends the run.
  bool stop_on_error = false;

  void check(std::size_t) const { check_timeout(name, timeout); }
  ApplyAtOnce make_rules(Counters const& c) const { return ApplyAtOnce(c.local_steps.size()); }
  bool continue_after_error() const { return !stop_on_error; }
  friend bool operator==(Asynchronous const&, Asynchronous const&) = default;
};
static_assert(synchronization_policy<Asynchronous>);

}  // namespace convoy::sync
