// ClockTable: the rule of sync::BoundedStaleness<S>. Each replica's clock counts its applied
// steps; a replica may start a step only while its clock is at most S ahead of the slowest live
// replica's. Gradients are applied on arrival, as in asynchronous training.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "rules.hpp"

namespace convoy::sync {

class ClockTable {
 public:
  /// `clocks`: each replica's starting clock (its steps so far, when resuming).
  ClockTable(std::vector<std::int64_t> clocks, int staleness)
      : clocks_(std::move(clocks)), staleness_(staleness) {}
  ClockTable(std::size_t replicas, int staleness)
      : ClockTable(std::vector<std::int64_t>(replicas, 0), staleness) {}

  bool lock_step() const { return false; }
  /// True while `replica` leads the slowest live replica by at most S clocks.
  bool may_start(std::size_t replica) const { return lead(replica) <= staleness_; }
  std::int64_t open_step() const { return 0; }
  Admission admit(std::size_t, std::int64_t) { return Admission::apply; }
  bool accumulated(std::size_t) { return true; }
  void applied(std::size_t replica) { ++clocks_[replica]; }
  /// A replica that has stopped no longer holds the others back.
  void retire(std::size_t replica) { clocks_[replica] = retired; }
  std::size_t gradients_per_update() const { return 1; }
  bool accumulates() const { return false; }

  /// Clocks `replica` is ahead of the slowest live replica (0 when it is the slowest).
  std::int64_t lead(std::size_t replica) const {
    return clocks_[replica] == retired ? 0 : clocks_[replica] - clocks_[slowest()];
  }
  /// The live replica with the lowest clock (the first of equals).
  std::size_t slowest() const {
    return static_cast<std::size_t>(std::min_element(clocks_.begin(), clocks_.end()) -
                                    clocks_.begin());
  }
  std::int64_t clock(std::size_t replica) const { return clocks_[replica]; }
  /// Who `replica` waits for, for a timeout's message.
  std::string waiting_for(std::size_t replica) const {
    auto const s = slowest();
    return "replica " + std::to_string(s) + " (clock " + std::to_string(clocks_[s]) +
           "; replica " + std::to_string(replica) + " is at " + std::to_string(clocks_[replica]) +
           ", at most " + std::to_string(staleness_) + " ahead allowed)";
  }

 private:
  static constexpr std::int64_t retired = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> clocks_;
  int staleness_;
};
static_assert(rules<ClockTable>);

}  // namespace convoy::sync
