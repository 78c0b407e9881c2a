// What both lock-step engines (the in-process one and the bucketed collective one) do once every
// replica has finished a step: count it, report it to the plan's after_step, and decide whether the
// run stops there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "../../core/snapshot.hpp"
#include "../../train/step.hpp"
#include "replica_threads.hpp"

namespace convoy::comm::in_process {

/// Counts one lock step of every replica in `counters` (one update; one applied gradient and one
/// local step per replica; with data planned again, the plan's batches its rows make), reports it
/// to `plan.after_step` as replica `reporter` saw it, with the mean of this process's `losses` and
/// the reporter's compute `seconds`, and returns true when the run stops there: after_step returned
/// false or threw (the exception goes to `error`), or the plan is reached.
inline bool count_lock_step(Counters& counters, std::span<float const> losses, double seconds,
                            std::size_t reporter, RunPlan const& plan, FirstError& error) noexcept {
  ++counters.global_step;
  counters.applied += static_cast<std::int64_t>(counters.local_steps.size());
  for (auto& local : counters.local_steps) ++local;
  // Data planned again draws its own batch a step: as many of the plan's batches as its rows
  // make, which the replicas' steps show only while each draws the plan's own batch.
  if (plan.batch_rows > 0 && counters.data.batch > 0) {
    counters.retired += counters.data.batch / plan.batch_rows -
                        static_cast<std::int64_t>(counters.local_steps.size());
  }
  float loss = 0.0f;
  for (float l : losses) loss += l;
  StepReport const report{.global_step = counters.global_step,
                          .local_step = counters.local_steps[reporter],
                          .replica = reporter,
                          .loss = loss / static_cast<float>(losses.size()),
                          .seconds = seconds,
                          .applied = counters.applied,
                          .dropped = counters.dropped,
                          .batches = counters.batches()};
  bool stop = false;
  try {
    if (plan.after_step && !plan.after_step(report)) stop = true;
  } catch (...) {
    error.capture();
    stop = true;
  }
  return stop || plan.reached(counters.global_step, counters.batches());
}

}  // namespace convoy::comm::in_process
