// Which rows each worker of a parameter-server cluster trains on next, handed out by ps:0 in its
// answers. The data is the sampler's plan for the cluster's N workers cut into slices: slice k is
// worker k % N's share of global batch k / N (io::Sampler::fill). A worker trains the slice it was
// given and names it in its push; ps:0 hands each slice out once, and takes one back only when its
// gradient can no longer come: its worker was lost, or said goodbye, holding it. The next worker
// to ask gets such a slice first. So within an epoch no slice is trained twice or skipped because
// a worker was lost or came back, and a lost worker's share of the data goes to the live ones.
//
// Nothing fails: each worker takes its own place in the next global batch, so the workers train
// exactly the plan of fixed ranks (and a device's prefetch guesses right). A worker whose place
// was taken, or that runs ahead of a slow or lost one, takes the earliest slice nobody has: no
// worker is more than one global batch ahead of the earliest slice not yet handed out, and no
// slice is left behind.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace convoy::comm::zmq_ps {

class DataSlices {
 public:
  explicit DataSlices(std::size_t workers) : held_(workers, none) {}

  static constexpr std::int64_t none = -1;

  /// The slice `worker` trains next: the one it holds, else a slice it now holds.
  std::int64_t give(std::size_t worker) {
    auto& held = held_[worker];
    if (held != none) return held;
    if (!returned_.empty()) {
      held = *returned_.begin();
      returned_.erase(returned_.begin());
      return held;
    }
    auto const n = static_cast<std::int64_t>(held_.size());
    auto const w = static_cast<std::int64_t>(worker);
    std::int64_t const own = frontier_ + ((w - frontier_ % n) % n + n) % n;  // its next place
    held = ahead_.contains(own) ? frontier_ : own;
    issue(held);
    return held;
  }

  /// Whether `worker` may put a gradient computed on `slice` into a step: the slice is the one it
  /// holds, or one it held when it was lost that nobody has taken since. Otherwise the slice went
  /// to another worker while this one was gone, and the gradient is to be dropped.
  bool may_train(std::size_t worker, std::int64_t slice) const {
    return slice != none && (slice == held_[worker] || returned_.contains(slice));
  }

  /// `worker`'s gradient on `slice` (may_train) went into a step: the worker holds no slice until
  /// an answer gives it the next one.
  void trained(std::size_t worker, std::int64_t slice) {
    auto& held = held_[worker];
    if (slice != held && returned_.erase(slice) > 0 && held != none) {
      returned_.insert(held);  // given to it since it came back: nobody has trained it
    }
    held = none;
  }

  /// `worker` was lost, or said goodbye: the slice it held goes to the next worker that asks.
  void give_back(std::size_t worker) {
    auto& held = held_[worker];
    if (held != none) returned_.insert(held);
    held = none;
  }

  /// A restore of counters whose workers' batches sum to `trained` (Counters::batches(), one slice
  /// each): the data goes on from slice `trained`. A rollback forgets every slice handed out;
  /// otherwise (the same run's state set again, or a resume before training) no slice is handed
  /// out twice.
  void restart(std::int64_t trained, bool roll_back) {
    if (roll_back) {
      std::fill(held_.begin(), held_.end(), none);
      returned_.clear();
      ahead_.clear();
      frontier_ = trained;
      return;
    }
    if (trained <= frontier_) return;
    frontier_ = trained;
    ahead_.erase(ahead_.begin(), ahead_.lower_bound(frontier_));
    while (ahead_.erase(frontier_) > 0) ++frontier_;
  }

  std::int64_t held(std::size_t worker) const { return held_[worker]; }
  /// The earliest slice never handed out.
  std::int64_t frontier() const { return frontier_; }

 private:
  void issue(std::int64_t slice) {
    if (slice != frontier_) {
      ahead_.insert(slice);
      return;
    }
    ++frontier_;
    while (ahead_.erase(frontier_) > 0) ++frontier_;
  }

  std::vector<std::int64_t> held_;
  std::set<std::int64_t> returned_;  ///< handed out, their gradients never came: given first
  std::set<std::int64_t> ahead_;     ///< handed out past the frontier
  std::int64_t frontier_ = 0;
};

}  // namespace convoy::comm::zmq_ps
