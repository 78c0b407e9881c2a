// A snapshot checked against a model's layout and optimizer and unpacked into flat arrays, for an
// engine's restore(): every check runs before anything changes, and counters taken with another
// replica count are carried over the same way by every engine.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../core/variables.hpp"
#include "../optim/optimizer.hpp"

namespace convoy::comm {

struct UnpackedSnapshot {
  std::vector<float> weights;   ///< flat, in layout order
  optim::OptimizerState slots;  ///< laid out like the weights, with the update count
  Counters counters;            ///< with one local step per replica of the restoring engine
};

/// Checks `s` against `layout` and `optimizer` and unpacks it for `replicas` replicas. Throws
/// LoadError naming unknown, missing and mis-shaped weights or slots, and Error for another
/// optimizer or counters that are negative or name no replica. Taken with another replica count,
/// every replica continues at the mean local step: a replica's local step indexes the global
/// batches, so the data consumed (in epochs) and the global step are kept.
inline UnpackedSnapshot unpack(Snapshot const& s, Variables const& layout,
                               optim::Optimizer const& optimizer, std::size_t replicas) {
  layout.check_names(s.weights, "restore");
  if (s.optimizer != optimizer.name()) {
    throw Error("convoy: the snapshot holds " + s.optimizer + " state but this strategy uses " +
                std::string(optimizer.name()));
  }
  UnpackedSnapshot out;
  out.slots = optimizer.make_state(layout.element_count());
  optim::set_named_slots(optimizer, out.slots, layout, s.slots);
  out.slots.updates = s.optimizer_updates;
  auto const& c = s.counters;
  bool const negative = c.global_step < 0 || c.applied < 0 || c.dropped < 0 ||
                        s.optimizer_updates < 0 ||
                        std::ranges::any_of(c.local_steps, [](auto k) { return k < 0; });
  if (negative || c.local_steps.empty()) {
    throw Error("convoy: the snapshot's counters are negative or name no replica");
  }
  out.weights.resize(layout.element_count());
  layout.assign_named(s.weights, out.weights);
  out.counters = c;
  if (c.local_steps.size() != replicas) {
    auto const mean = (c.batches() - c.retired) / static_cast<std::int64_t>(c.local_steps.size());
    out.counters.local_steps.assign(replicas, mean);
  }
  return out;
}

}  // namespace convoy::comm
