// sync::Asynchronous: each replica applies its own gradients to the shared weights as soon as they
// are ready; the global step is the sum of all replicas' steps.
#pragma once

#include <string_view>

#include "../core/concepts.hpp"

namespace convoy::sync {

struct Asynchronous {
  using policy_category = synchronization_tag;
  static constexpr std::string_view name = "Asynchronous";
  friend bool operator==(Asynchronous const&, Asynchronous const&) = default;
};
static_assert(synchronization_policy<Asynchronous>);

}  // namespace convoy::sync
