// ApplyAtOnce: the rule of sync::Asynchronous. Every gradient is applied on its own the moment it
// arrives; nobody waits for anybody, so the global step is the sum of the replicas' steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "rules.hpp"

namespace convoy::sync {

class ApplyAtOnce {
 public:
  explicit ApplyAtOnce(std::size_t /*replicas*/ = 0) {}

  bool lock_step() const { return false; }
  bool may_start(std::size_t) const { return true; }
  std::int64_t open_step() const { return 0; }
  Admission admit(std::size_t, std::int64_t) { return Admission::apply; }
  bool accumulated(std::size_t) { return true; }
  void applied(std::size_t) {}
  void retire(std::size_t) {}
  std::string waiting_for(std::size_t) const { return {}; }
  std::size_t gradients_per_update() const { return 1; }
  bool accumulates() const { return false; }
};
static_assert(rules<ApplyAtOnce>);

}  // namespace convoy::sync
