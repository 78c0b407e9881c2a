// What a shard and its workers must agree on, as one number every request carries: a worker whose
// fingerprint differs from its shard's runs another model or configuration.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "../../core/detail/fnv1a.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "../../sync/rules.hpp"

namespace convoy::comm::zmq_ps {

/// The shard's pieces, the optimizer with its settings, the Sync policy with its knobs, and the
/// cluster's size, hashed (FNV-1a).
template <class Sync>
std::uint64_t fingerprint(std::span<place::Piece const* const> pieces,
                          optim::Optimizer const& optimizer, Sync const& sync, std::size_t shards,
                          std::size_t workers) {
  convoy::detail::Fnv1a h;
  auto mix = [&](std::string_view bytes) { h.add(bytes); };
  auto number = [&](std::uint64_t v) { mix(std::to_string(v) + ";"); };
  mix(optimizer.name());
  std::visit(
      [&](auto const& o) {  // the settings: a few floats, no padding
        mix({reinterpret_cast<char const*>(&o), sizeof o});
      },
      optimizer.get());
  mix(Sync::name);
  if constexpr (sync::takes_first_m<Sync>)
    number(static_cast<std::uint64_t>(sync.replicas_to_aggregate));
  if constexpr (sync::survives_losses<Sync>) {
    number(static_cast<std::uint64_t>(sync.min_workers));
    number(sync.stop_on_lost_worker ? 1 : 0);
  }
  if constexpr (sync::has_staleness_bound<Sync>)
    number(static_cast<std::uint64_t>(Sync::staleness));
  number(shards);
  number(workers);
  for (auto const* p : pieces) {
    mix(p->variable);
    number(p->begin);
    number(p->end);
  }
  return h.value();
}

}  // namespace convoy::comm::zmq_ps
