// place::Mirrored: one replica per thread (one per core by default), each with its own copy of
// every variable; the synchronization policy keeps the copies identical.
#pragma once

#include <cstddef>
#include <string_view>

#include "../core/concepts.hpp"
#include "../exec/host.hpp"
#include "host_threads.hpp"

namespace convoy::place {

struct Mirrored {
  using policy_category = placement_tag;
  static constexpr std::string_view name = "Mirrored";
  static constexpr bool shared_weights = false;
  int replicas = 0;  ///< 0: one per CPU this process may use
  bool log_placement = false;

  using context_type = exec::Host;
  /// The execution context replica `r` computes in.
  exec::Host context(std::size_t) const { return {}; }
  int replica_count() const { return detail::replicas_or_one_per_core(replicas); }
  friend bool operator==(Mirrored const&, Mirrored const&) = default;
};
static_assert(placement_policy<Mirrored>);

}  // namespace convoy::place
