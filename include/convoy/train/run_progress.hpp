// RunProgress: where one fit() call stands: the interval since the last record, the epoch of the
// data used, the totals the run aims at and its ETA. The numbers behind the progress lines and
// the history's records.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>

#include "history.hpp"
#include "progress.hpp"
#include "step.hpp"

namespace convoy::detail {

/// Written from after_step, one call at a time.
struct RunProgress {
  using Clock = std::chrono::steady_clock;
  struct Interval {
    Clock::time_point time;
    std::int64_t step = 0;
    std::int64_t applied = 0;
    std::int64_t batches = 0;
    double loss_sum = 0.0;
    std::int64_t losses = 0;
  };
  RunPlan const& plan;
  std::int64_t start_step = 0;
  std::int64_t start_batches = 0;
  std::int64_t batches_per_epoch = 1;
  double rows_per_gradient = 0.0;
  std::int64_t lock_step_batches = 0;  // batches per global step in lock step; 0: measured
  Clock::time_point start;
  Interval interval;
  // In lock step, the batches per global step of the last interval: a group that changed
  // (comm::Gloo's regroup) trains another number of them a step than it began with.
  double recent_batches_per_step = 0.0;

  void add_loss(float loss) {
    interval.loss_sum += static_cast<double>(loss);
    ++interval.losses;
  }
  // Batches per global step: in lock step the last interval's (exact while the group stays), else
  // as measured in this run.
  double batches_per_step(std::int64_t step, std::int64_t batches) const {
    if (lock_step_batches > 0) {
      return recent_batches_per_step > 0.0 ? recent_batches_per_step
                                           : static_cast<double>(lock_step_batches);
    }
    if (step <= start_step || batches <= start_batches) return 1.0;
    return static_cast<double>(batches - start_batches) / static_cast<double>(step - start_step);
  }
  RunTotals totals(std::int64_t step, std::int64_t batches) const {
    RunTotals t;
    double const per_step = batches_per_step(step, batches);
    double total_batches = 0.0, done = 0.0;
    // In lock step the totals go on from where the run stands, at the group's present rate (the
    // same as from the start while the group stays); otherwise at the run's mean rate.
    bool const from_now = lock_step_batches > 0;
    if (plan.until > 0) {
      t.steps = plan.until;
      total_batches = from_now ? static_cast<double>(batches) +
                                     static_cast<double>(plan.until - step) * per_step
                               : static_cast<double>(start_batches) +
                                     static_cast<double>(plan.until - start_step) * per_step;
      if (plan.until > start_step) {
        done =
            static_cast<double>(step - start_step) / static_cast<double>(plan.until - start_step);
      }
    } else {
      total_batches = static_cast<double>(plan.until_batches);
      auto const [from_step, from_batches] =
          from_now ? std::pair{step, batches} : std::pair{start_step, start_batches};
      t.steps = from_step + static_cast<std::int64_t>(std::llround(
                                static_cast<double>(plan.until_batches - from_batches) / per_step));
      if (plan.until_batches > start_batches) {
        done = static_cast<double>(batches - start_batches) /
               static_cast<double>(plan.until_batches - start_batches);
      }
    }
    t.epochs = static_cast<std::int64_t>(
        std::ceil(total_batches / static_cast<double>(batches_per_epoch) - 1e-9));
    double const elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (done > 0.0) t.eta_s = std::max(0.0, elapsed * (1.0 - done) / done);
    return t;
  }
  // The replica-sized batches trained: in lock step the data's own count (a group that keeps its
  // global batch over fewer replicas trains more rows a gradient), else the applied gradients.
  std::int64_t trained(std::int64_t applied, std::int64_t batches) const {
    return lock_step_batches > 0 ? batches : applied;
  }

  // A record at `step` with the epoch and the elapsed time filled in.
  HistoryRecord record(RecordKind kind, std::int64_t step, std::int64_t batches) const {
    HistoryRecord r;
    r.kind = kind;
    r.global_step = step;
    // The epoch the last batch belongs to, from 1: batch b (from 1) is in epoch ceil(b / per).
    r.epoch = std::max<std::int64_t>(1, (batches + batches_per_epoch - 1) / batches_per_epoch);
    r.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    return r;
  }
  // The record of the interval ending at `step`; the next interval starts here.
  HistoryRecord close_interval(std::int64_t step, std::int64_t batches, std::int64_t applied) {
    auto const now = Clock::now();
    HistoryRecord r = record(RecordKind::interval, step, batches);
    double const seconds = std::chrono::duration<double>(now - interval.time).count();
    if (interval.losses > 0) {
      r.loss = interval.loss_sum / static_cast<double>(interval.losses);
    }
    if (seconds > 0.0) {
      r.samples_per_s =
          static_cast<double>(trained(applied - interval.applied, batches - interval.batches)) *
          rows_per_gradient / seconds;
      if (step > interval.step)
        r.seconds_per_step = seconds / static_cast<double>(step - interval.step);
    }
    if (step > interval.step) {
      r.gradients_per_step = static_cast<double>(applied - interval.applied) /
                             static_cast<double>(step - interval.step);
      if (lock_step_batches > 0) {
        recent_batches_per_step = static_cast<double>(batches - interval.batches) /
                                  static_cast<double>(step - interval.step);
      }
    }
    interval = Interval{now, step, applied, batches};
    return r;
  }
};

}  // namespace convoy::detail
