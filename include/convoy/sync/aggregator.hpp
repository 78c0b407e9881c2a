// Aggregator: the rule of sync::Synchronous. Gradients carry the step they were computed for; the
// open step takes the first M of them (M = replicas_to_aggregate) and is applied once all M are
// summed; a gradient for a step already applied, or one past the M-th, is late and dropped. With
// M equal to the replica count every replica takes every step (lock step).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rules.hpp"

namespace convoy::sync {

class Aggregator {
 public:
  /// `to_aggregate` (M) must be in [1, replicas] (the policies check).
  Aggregator(std::size_t replicas, std::size_t to_aggregate, std::int64_t first_step = 0)
      : contributed_(replicas, 0), to_aggregate_(to_aggregate), open_(first_step) {}

  bool lock_step() const { return to_aggregate_ == contributed_.size(); }
  /// False while the open step has all its M places taken: a gradient computed for it now would
  /// only be dropped, so the replica waits for the next step instead of computing in vain.
  bool may_start(std::size_t) const { return reserved_ < to_aggregate_; }
  /// The step a gradient computed now is for.
  std::int64_t open_step() const { return open_; }

  /// A gradient of `replica` computed for step `tag`: accumulate it when its step is still open
  /// and has a free place among the M, else drop it.
  Admission admit(std::size_t replica, std::int64_t tag) {
    if (tag != open_ || reserved_ == to_aggregate_ || contributed_[replica]) {
      return Admission::drop;
    }
    ++reserved_;
    contributed_[replica] = 1;
    return Admission::accumulate;
  }
  /// `replica`'s admitted gradient is in the sum; true when it completes the step's M gradients,
  /// and so its caller applies the sum.
  bool accumulated(std::size_t) { return ++summed_ == to_aggregate_; }
  /// The open step was applied: open the next one.
  void applied(std::size_t) {
    ++open_;
    reserved_ = summed_ = 0;
    std::fill(contributed_.begin(), contributed_.end(), 0);
  }
  void retire(std::size_t) {}
  std::size_t gradients_per_update() const { return to_aggregate_; }
  bool accumulates() const { return true; }
  /// Gives up the open step without applying it (a run ends before M gradients came); returns how
  /// many gradients it had summed, which are dropped. The step stays open for a later run.
  std::size_t discard() {
    std::size_t const summed = summed_;
    reserved_ = summed_ = 0;
    std::fill(contributed_.begin(), contributed_.end(), 0);
    return summed;
  }

  /// Gradients summed for the open step so far.
  std::size_t summed() const { return summed_; }
  /// Replicas that have not contributed to the open step, for a timeout's message.
  std::string waiting_for(std::size_t) const {
    std::string missing;
    for (std::size_t r = 0; r < contributed_.size(); ++r) {
      if (!contributed_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    return "step " + std::to_string(open_ + 1) + " has " + std::to_string(summed_) + " of " +
           std::to_string(to_aggregate_) + " gradients; replica(s) " + missing +
           " have not delivered";
  }

 private:
  std::vector<char> contributed_;
  std::size_t to_aggregate_;
  std::int64_t open_;
  std::size_t reserved_ = 0;
  std::size_t summed_ = 0;
};
static_assert(rules<Aggregator>);

}  // namespace convoy::sync
