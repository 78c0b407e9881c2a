// Which rows each worker of a parameter-server cluster trains on next, handed out by ps:0 in its
// answers. The data is the sampler's plan for the cluster's N workers cut into slices: slice k is
// worker k % N's share of global batch k / N (io::Sampler::fill). A worker trains the slice it was
// given and names it in its push; ps:0 hands each slice out once, and takes one back only when its
// gradient can no longer come: its worker was lost, or said goodbye, holding it. The next worker
// to ask gets such a slice first. So within an epoch no slice is trained twice or skipped because
// a worker was lost or came back, and a lost worker's share of the data goes to the live ones.
// A worker may be given several slices at once, to train as one batch (the global batch kept by a
// smaller group).
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
#include <span>
#include <vector>

namespace convoy::comm::zmq_ps {

class DataSlices {
 public:
  explicit DataSlices(std::size_t workers) : held_(workers) {}

  /// The slices `worker` trains next: those it holds, else `count` it now holds. The first is its
  /// own place in the next global batch while that is free; slices handed back come first.
  std::vector<std::int64_t> const& give(std::size_t worker, std::size_t count = 1) {
    auto& held = held_[worker];
    if (!held.empty()) return held;
    auto const n = static_cast<std::int64_t>(held_.size());
    auto const w = static_cast<std::int64_t>(worker);
    while (held.size() < count) {
      if (!returned_.empty()) {
        held.push_back(*returned_.begin());
        returned_.erase(returned_.begin());
        continue;
      }
      std::int64_t const own = frontier_ + ((w - frontier_ % n) % n + n) % n;  // its next place
      std::int64_t const slice = held.empty() && !ahead_.contains(own) ? own : frontier_;
      issue(slice);
      held.push_back(slice);
    }
    return held;
  }

  /// Whether `worker` may put a gradient computed on `slices` into a step: each is one it holds,
  /// or one it held when it was lost that nobody has taken since, and none twice. Otherwise a
  /// slice went to another worker while this one was gone, and the gradient is to be dropped.
  bool may_train(std::size_t worker, std::span<std::int64_t const> slices) const {
    if (slices.empty()) return false;
    auto const& held = held_[worker];
    for (std::size_t i = 0; i < slices.size(); ++i) {
      auto const s = slices[i];
      if (std::find(slices.begin(), slices.begin() + static_cast<std::ptrdiff_t>(i), s) !=
          slices.begin() + static_cast<std::ptrdiff_t>(i)) {
        return false;
      }
      if (std::find(held.begin(), held.end(), s) == held.end() && !returned_.contains(s)) {
        return false;
      }
    }
    return true;
  }

  /// `worker`'s gradient on `slices` (may_train) went into a step: the worker holds none until an
  /// answer gives it the next; any it was given since it came back go to the next worker.
  void trained(std::size_t worker, std::span<std::int64_t const> slices) {
    auto& held = held_[worker];
    for (auto const s : slices) {
      auto const it = std::find(held.begin(), held.end(), s);
      if (it != held.end()) {
        held.erase(it);
      } else {
        returned_.erase(s);
      }
    }
    give_back(worker);
  }

  /// `worker` was lost, or said goodbye: the slices it held go to the next worker that asks.
  void give_back(std::size_t worker) {
    auto& held = held_[worker];
    returned_.insert(held.begin(), held.end());
    held.clear();
  }

  /// A restore of counters whose workers' batches sum to `trained` (Counters::batches(), one a
  /// slice): the data goes on from slice `trained`. A rollback forgets every slice handed out;
  /// otherwise (the same run's state set again, or a resume before training) no slice is handed
  /// out twice.
  void restart(std::int64_t trained, bool roll_back) {
    if (roll_back) {
      for (auto& held : held_) held.clear();
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

  std::vector<std::int64_t> const& held(std::size_t worker) const { return held_[worker]; }
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

  std::vector<std::vector<std::int64_t>> held_;
  std::set<std::int64_t> returned_;  ///< handed out, their gradients never came: given first
  std::set<std::int64_t> ahead_;     ///< handed out past the frontier
  std::int64_t frontier_ = 0;
};

}  // namespace convoy::comm::zmq_ps
