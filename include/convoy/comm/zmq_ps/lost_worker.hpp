// What a shard does with a worker it lost before its goodbye: the worker's connection closed (its
// process died; the kernel closes its sockets at once, even after SIGKILL) or, with
// ZmqPs::heartbeat on, the worker stayed silent past the heartbeat. The Sync rules decide whether
// the others can go on without it.
#pragma once

#include <cstddef>

#include "../../sync/rules.hpp"

namespace convoy::comm::zmq_ps {

enum class OnLoss {
  /// It counts as departed, as if it had said goodbye: the others go on, and the shard ends once
  /// the others have said theirs. It is served again if it comes back (a restarted process).
  depart,
  /// The run cannot go on without it: the shard answers every request with an error naming it,
  /// and stops with that error once the other workers have heard it.
  fail,
  /// It keeps its place: the others wait for it, up to the Sync policy's timeout.
  wait,
};

/// The rule for a lost worker. `workers`: the cluster's; `live`: the workers still training
/// besides the lost one (neither said goodbye nor were lost); `finished`: those that said goodbye.
template <class Rules, class Sync>
OnLoss on_loss(Rules const& rules, Sync const& sync, std::size_t workers, std::size_t live,
               std::size_t finished) {
  if (!rules.accumulates()) {
    // Bounded staleness (a clock table has lead()): retired, its clock could not be given back
    // when it returns, so it keeps its place and holds the leaders back as a slow worker does.
    if constexpr (sync::bounds_staleness<Rules>) return OnLoss::wait;
    return OnLoss::depart;  // asynchronous: nobody waits for anybody
  }
  // Synchronous. Every other worker said goodbye: the run is over, nothing waits for this one.
  if (live == 0 && finished > 0) return OnLoss::depart;
  // Never below sync::Synchronous::min_workers.
  if constexpr (sync::survives_losses<Sync>) {
    if (live < static_cast<std::size_t>(sync.min_workers)) return OnLoss::fail;
  }
  // Backup workers (replicas_to_aggregate M below the worker count) absorb it while M are left.
  std::size_t const m = rules.gradients_per_update();
  if (m < workers && live >= m) return OnLoss::depart;
  // Below that, the group shrinks, unless told to stop (sync::Synchronous::stop_on_lost_worker).
  if constexpr (sync::survives_losses<Sync>) {
    if (sync::elastic<Rules> && sync.goes_on_with(live)) return OnLoss::depart;
  }
  return OnLoss::fail;
}

}  // namespace convoy::comm::zmq_ps
