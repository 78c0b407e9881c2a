// sync::Synchronous: every step applies one update built from the replicas' gradients. With
// replicas_to_aggregate M below the replica count, a step goes ahead with the first M gradients and
// late ones are dropped and counted, so a slow replica does not stall the others.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "aggregator.hpp"

namespace convoy::sync {

struct Synchronous {
  using policy_category = synchronization_tag;
  using rules_type = Aggregator;
  static constexpr std::string_view name = "Synchronous";
  int replicas_to_aggregate = 0;  ///< M; 0: all replicas
  /// The longest a replica may take over one step (its batch and forward_backward) or wait for the
  /// M-th gradient; past it, run() throws a TimeoutError naming it.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  /// On a parameter-server cluster (comm::ZmqPs), a worker lost before its goodbye (its process
  /// died, or it stayed silent past the heartbeat) leaves the group: the steps from then on take
  /// the gradients of the live workers (M shrinks with them, and grows back, up to
  /// replicas_to_aggregate, when a worker returns). A loss that leaves fewer than `min_workers`
  /// live stops the run with an error naming the lost worker; so does, with
  /// `stop_on_lost_worker`, one that leaves fewer than M (backup workers still absorb losses
  /// while M are left, as they always did).
  int min_workers = 1;
  bool stop_on_lost_worker = false;

  /// Throws Error when M is outside 0..replicas or the timeout is not positive.
  void check(std::size_t replicas) const {
    if (replicas_to_aggregate < 0 || static_cast<std::size_t>(replicas_to_aggregate) > replicas) {
      throw Error("convoy: replicas_to_aggregate is " + std::to_string(replicas_to_aggregate) +
                  " but there are " + std::to_string(replicas) + " replicas; pick 1.." +
                  std::to_string(replicas) + " (0: all)");
    }
    check_timeout(name, timeout);
    if (min_workers < 1 || static_cast<std::size_t>(min_workers) > replicas) {
      throw Error("convoy: min_workers is " + std::to_string(min_workers) + " but there are " +
                  std::to_string(replicas) + " replicas; pick 1.." + std::to_string(replicas) +
                  " (stop_on_lost_worker = true stops at the first loss)");
    }
  }
  Aggregator make_rules(Counters const& c) const {
    std::size_t const n = c.local_steps.size();
    return Aggregator(n, replicas_to_aggregate == 0 ? n : std::size_t(replicas_to_aggregate),
                      c.global_step);
  }
  /// Whether a group that has lost a worker and has `live` left trains on (see min_workers).
  bool goes_on_with(std::size_t live) const {
    return !stop_on_lost_worker && live >= static_cast<std::size_t>(min_workers);
  }
  bool continue_after_error() const { return false; }
  friend bool operator==(Synchronous const&, Synchronous const&) = default;
};
static_assert(synchronization_policy<Synchronous>);

}  // namespace convoy::sync
