// StepReport and RunPlan: what a strategy tells its driver after each step, and what the driver
// hands the strategy to run. The Trainer is the usual driver; tests and benchmarks drive directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "../core/batch.hpp"
#include "../core/snapshot.hpp"

namespace convoy {

/// What happened in one update of the shared weights, as the replica that completed it saw it.
/// Counters follow TensorFlow: `global_step` counts updates (one per aggregated step when
/// synchronous, one per applied gradient when asynchronous), `local_step` the reporting replica's
/// own steps.
struct StepReport {
  std::int64_t global_step = 0;  ///< updates applied to the shared weights so far
  std::int64_t local_step = 0;   ///< the reporting replica's own steps so far
  std::size_t replica = 0;       ///< the reporting replica
  float loss = 0.0f;             ///< mean loss of the gradients in this update
  double seconds = 0.0;          ///< the reporting replica's compute time for its batch
  std::int64_t applied = 0;      ///< gradients applied so far, over all replicas
  std::int64_t dropped = 0;      ///< late gradients dropped so far (replicas_to_aggregate)
  std::int64_t batches = 0;      ///< batches computed so far, over all replicas (the data used)
  std::int64_t lead = 0;  ///< clocks the reporting replica was ahead of the slowest at its start
};

/// A run of training steps. `batch` is called on each replica's own thread, and the Batch it returns
/// must stay valid while that replica computes, even past run() when a stuck replica is abandoned
/// (own the buffers through the function object). `after_step` is called by one thread at a time,
/// at least one of `until` and `until_batches` is set, and a snapshot taken in it is consistent.
struct RunPlan {
  std::int64_t until = 0;          ///< stop once global_step reaches this; 0: no limit
  std::int64_t until_batches = 0;  ///< stop once the replicas have computed this many batches in
                                   ///< all (a lock-step run: a multiple of the replicas); 0: no limit
  std::function<Batch(std::size_t replica, std::int64_t local_step)> batch;
  std::function<bool(StepReport const&)> after_step;  ///< false stops the run
  /// Optional, for an engine whose group re-forms between steps (comm::Gloo): replica `replica`
  /// of `origin.replicas`' batch of global step `step`, with the data planned from `origin`, and
  /// the origin a group of `replicas` goes on from at global step `step`, after `from`. Without
  /// them a re-formed group's replicas read the slices of their new numbers in batch()'s global
  /// batches, and the missing numbers' slices are skipped.
  std::function<Batch(std::size_t replica, std::int64_t step, DataOrigin const& origin)> batch_at{};
  std::function<DataOrigin(DataOrigin const& from, std::int64_t step, std::size_t replicas)>
      replan{};
  /// Rows of one replica's batch in the plan every run starts with (with batch_at): a lock step
  /// of data planned again (DataOrigin::batch rows) counts as that many rows' worth of such
  /// batches, so that `until_batches` and the epochs count rows whatever each replica now draws
  /// (a global batch kept over fewer replicas). 0: one batch a replica, as without a change.
  std::int64_t batch_rows = 0;
  /// For an engine that shares out the data itself (comm::ZmqPs's slices): whether a smaller group
  /// trains the whole global batch (FitOptions::keep_global_batch) rather than each worker's.
  bool keep_global_batch = false;

  /// True once `c` has reached a goal of the plan.
  bool reached(std::int64_t global_step, std::int64_t batches) const {
    return (until > 0 && global_step >= until) || (until_batches > 0 && batches >= until_batches);
  }
};

}  // namespace convoy
