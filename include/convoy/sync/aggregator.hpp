// Aggregator: the rule of sync::Synchronous. Gradients carry the step they were computed for; the
// open step takes the first M of them (M = replicas_to_aggregate) and is applied once all M are
// summed; a gradient for a step already applied, or one past the M-th, is late and dropped. With
// M equal to the replica count every replica takes every step (lock step). A member lost for good
// (leave) shrinks the group: a step then needs min(M, members) gradients, and the open step also
// counts the one the lost member gave before it went (computed on the step's weights, it is
// neither dropped nor applied twice). One that comes back counts again from its first gradient:
// admitted when its step is open, else dropped as late, and the next step waits for it either way.
// Rejoining at a gradient rather than at a hello keeps the shards of a cluster in step: each one's
// steps stay driven by the members' gradients, whenever the returning worker reaches it.
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
      : contributed_(replicas, 0),
        member_(replicas, 1),
        to_aggregate_(to_aggregate),
        needed_(to_aggregate),
        open_(first_step) {}

  bool lock_step() const { return to_aggregate_ == contributed_.size(); }
  /// False while the open step has all its M places taken: a gradient computed for it now would
  /// only be dropped, so the replica waits for the next step instead of computing in vain.
  bool may_start(std::size_t) const { return reserved_ < needed(); }
  /// The step a gradient computed now is for.
  std::int64_t open_step() const { return open_; }

  /// A gradient of `replica` computed for step `tag`: accumulate it when its step is still open
  /// and has a free place among the M, else drop it.
  Admission admit(std::size_t replica, std::int64_t tag) {
    if (!member_[replica]) {
      member_[replica] = 1;
      recount();
    }
    if (tag != open_ || reserved_ >= needed() || contributed_[replica]) {
      return Admission::drop;
    }
    ++reserved_;
    contributed_[replica] = 1;
    return Admission::accumulate;
  }
  /// `replica`'s admitted gradient is in the sum; true when it completes the step's M gradients,
  /// and so its caller applies the sum.
  bool accumulated(std::size_t) { return ++summed_ >= needed(); }
  /// The open step was applied: open the next one.
  void applied(std::size_t) {
    ++open_;
    reserved_ = summed_ = 0;
    std::fill(contributed_.begin(), contributed_.end(), 0);
    recount();
  }
  void retire(std::size_t) {}
  /// The gradients the open step takes: M, or fewer once members were lost.
  std::size_t gradients_per_update() const { return needed(); }

  /// `replica` is lost for good. Returns true when that completes the open step (every member
  /// left has given its gradient): its caller applies the sum now.
  bool leave(std::size_t replica) {
    member_[replica] = 0;
    recount();
    return summed_ > 0 && summed_ >= needed();
  }
  bool member(std::size_t replica) const { return member_[replica] != 0; }
  /// Whether `replica`'s gradient is in the open step.
  bool contributed(std::size_t replica) const { return contributed_[replica] != 0; }
  bool accumulates() const { return true; }
  /// Gives up the open step without applying it (a run ends before M gradients came); returns how
  /// many gradients it had summed, which are dropped. The step stays open for a later run.
  std::size_t discard() {
    std::size_t const summed = summed_;
    reserved_ = summed_ = 0;
    std::fill(contributed_.begin(), contributed_.end(), 0);
    recount();
    return summed;
  }

  /// Gradients summed for the open step so far.
  std::size_t summed() const { return summed_; }
  /// Replicas that have not contributed to the open step, for a timeout's message.
  std::string waiting_for(std::size_t) const {
    std::string missing;
    for (std::size_t r = 0; r < contributed_.size(); ++r) {
      if (!contributed_[r] && member_[r])
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    return "step " + std::to_string(open_ + 1) + " has " + std::to_string(summed_) + " of " +
           std::to_string(needed()) + " gradients; replica(s) " + missing + " have not delivered";
  }

 private:
  // min(M, the members and the lost replicas whose gradient is in the open step), kept in
  // needed_ and written only when it changes: the in-process engines, whose replicas never leave,
  // read it outside their lock (to average a step) and so must never see it written.
  std::size_t needed() const { return needed_; }
  void recount() {
    std::size_t count = 0;
    for (std::size_t r = 0; r < member_.size(); ++r) count += member_[r] || contributed_[r];
    std::size_t const now = std::min(to_aggregate_, count);
    if (now != needed_) needed_ = now;
  }

  std::vector<char> contributed_;
  std::vector<char> member_;
  std::size_t to_aggregate_;
  std::size_t needed_;
  std::int64_t open_;
  std::size_t reserved_ = 0;
  std::size_t summed_ = 0;
};
static_assert(rules<Aggregator> && elastic<Aggregator>);

}  // namespace convoy::sync
