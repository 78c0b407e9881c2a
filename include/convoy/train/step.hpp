// StepReport and RunPlan: what a strategy tells its driver after each step, and what the driver
// hands the strategy to run. The Trainer is the usual driver; tests and benchmarks drive directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "../core/batch.hpp"

namespace convoy {

/// What happened in one step. In synchronous training `step` counts updates of the model and
/// `global_step` the gradients they used (replicas x steps; replicas_to_aggregate x steps when only
/// M gradients are aggregated, dropped ones not counted); in asynchronous training `global_step` is
/// the sum of all replicas' steps and `local_step` the reporting replica's.
struct StepReport {
  std::int64_t step = 0;         ///< updates applied to the weights so far
  std::int64_t global_step = 0;  ///< gradients applied so far, over all replicas
  std::int64_t local_step = 0;   ///< the reporting replica's own steps so far
  std::size_t replica = 0;       ///< the reporting replica
  float loss = 0.0f;             ///< mean loss of the gradients in this update
  double seconds = 0.0;          ///< the reporting replica's compute time for its batch
  std::int64_t dropped = 0;      ///< late gradients dropped so far (replicas_to_aggregate)
  std::int64_t lead = 0;  ///< clocks the reporting replica was ahead of the slowest at its start
};

/// A run of training steps. `batch` is called on each replica's own thread; `after_step` is called
/// by one thread at a time while the weights are consistent, so it may log, evaluate or checkpoint.
struct RunPlan {
  std::int64_t until = 0;  ///< stop when the step (sync) or global step (async) reaches this
  std::function<Batch(std::size_t replica, std::int64_t local_step)> batch;
  std::function<bool(StepReport const&)> after_step;  ///< false stops the run
};

}  // namespace convoy
