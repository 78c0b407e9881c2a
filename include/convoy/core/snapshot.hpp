// Snapshot and Counters: a strategy's whole state by name (weights, optimizer slots, counters and
// generator states), which the Trainer checkpoints and restores without ever reading an arena, and
// which a cluster engine gathers from its shards.
#pragma once

#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace convoy {

/// Where a lock-step run's data goes on from, once its group has re-formed (comm::Gloo): from
/// global step `step`, each step draws `batch` rows from `row` on, of the epochs' orders laid end
/// to end (epoch × rows + offset), split over `replicas` replicas. A value of 0 in `batch` or
/// `replicas` is the run's own; all zero, the plan every run starts with (step s draws the
/// run's global batch number s).
struct DataOrigin {
  std::int64_t step = 0;
  std::int64_t row = 0;
  std::int64_t batch = 0;
  std::int64_t replicas = 0;
  friend bool operator==(DataOrigin const&, DataOrigin const&) = default;
};

/// Progress as TensorFlow users count it.
struct Counters {
  /// Updates applied to the shared weights: one per aggregated step when synchronous, one per
  /// applied gradient when asynchronous (then the sum of the replicas' applied steps).
  std::int64_t global_step = 0;
  std::int64_t applied = 0;  ///< gradients that went into an update
  std::int64_t dropped = 0;  ///< gradients dropped as late (replicas_to_aggregate < replicas)
  /// Each replica's own steps: batches of its slice of the data whose gradients were applied (or
  /// are pending); a dropped gradient's batch is computed again, so it does not count.
  std::vector<std::int64_t> local_steps;
  /// Batches learned that the replicas' local steps do not show: those of replicas that have
  /// left the group (lost, in a group that re-formed without them), and, where the data was
  /// planned again with its global batch kept, the difference between the plan's batches a step's
  /// rows make and the replicas' steps. Still data consumed, so an epoch goal counts them.
  std::int64_t retired = 0;
  /// Where the data goes on from after a change of the group; travels with the counters to a
  /// process that joins, and into checkpoints.
  DataOrigin data{};

  /// Batches learned from over all replicas: the data consumed, in replica-sized batches.
  std::int64_t batches() const {
    return std::accumulate(local_steps.begin(), local_steps.end(), retired);
  }
  friend bool operator==(Counters const&, Counters const&) = default;
};

/// Everything a run needs to continue, keyed by variable name.
struct Snapshot {
  std::map<std::string, Tensor> weights;  ///< "<variable>" -> tensor
  std::string optimizer;                  ///< Optimizer::name(), to refuse slots of another one
  std::map<std::string, Tensor> slots;    ///< "<variable>/<slot>" -> tensor
  std::int64_t optimizer_updates = 0;     ///< updates the optimizer has applied (Adam's t)
  Counters counters;
  /// Each replica's generator (std::mt19937_64 as text); empty when it was taken while replicas
  /// were drawing from them (a callback of an asynchronous run).
  std::vector<std::string> generators;
  friend bool operator==(Snapshot const&, Snapshot const&) = default;
};

}  // namespace convoy
