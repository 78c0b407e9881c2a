// The lines Trainer::fit prints: LogFormat picks the progress line (epoch, step out of the total,
// interval mean loss, throughput, wall time per step, elapsed time and ETA) or the line of
// TensorFlow's examples; and the line that reports an evaluation.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string>

#include "history.hpp"
#include "step.hpp"

namespace convoy {

/// How fit() reports progress.
enum class LogFormat {
  /// `epoch 3/20  step 1200/6000  loss 0.4123  15230 samples/s  0.0131 s/step  12.3 s elapsed,
  /// ETA 41 s`: the loss is the mean over the interval, the rates are wall-clock.
  progress,
  /// `After N training steps (M global steps), loss on training batch is X (Y sec/batch)`, as
  /// TensorFlow's examples print: the last batch's loss and one replica's compute time for it.
  tensorflow,
};

/// Where a run stands against its goal, for the progress line. Totals of 0 are unknown.
struct RunTotals {
  std::int64_t epochs = 0;
  std::int64_t steps = 0;
  std::optional<double> eta_s;  ///< seconds left, once a step of this run has been timed
};

/// "12.3 s", "3 min 20 s", "2 h 05 min": seconds as a person reads them.
inline std::string duration_text(double seconds, bool tenths = true) {
  char text[48];
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return "? s";
  if (seconds < 60.0) {
    std::snprintf(text, sizeof text, tenths ? "%.1f s" : "%.0f s", seconds);
  } else if (seconds < 3600.0) {
    auto const s = static_cast<long long>(std::llround(seconds));
    std::snprintf(text, sizeof text, "%lld min %02lld s", s / 60, s % 60);
  } else {
    auto const m = static_cast<long long>(std::llround(seconds / 60.0));
    std::snprintf(text, sizeof text, "%lld h %02lld min", m / 60, m % 60);
  }
  return text;
}

namespace detail {
// "epoch 3/20  step 1200/6000", leaving out totals that are unknown.
inline void write_position(std::ostream& out, HistoryRecord const& r, RunTotals const& totals) {
  out << "epoch " << r.epoch;
  if (totals.epochs > 0) out << '/' << totals.epochs;
  out << "  step " << r.global_step;
  if (totals.steps > 0) out << '/' << totals.steps;
}
}  // namespace detail

/// "the group changed: 1 gradient(s) a step, was 2": an interval record's gradients a step,
/// rounded, after intervals of `was`.
inline std::string group_change(HistoryRecord const& r, std::int64_t was) {
  return "the group changed: " + std::to_string(std::llround(r.gradients_per_step.value_or(0.0))) +
         " gradient(s) a step, was " + std::to_string(was);
}

/// The progress line of an interval record; `dropped` late gradients are mentioned when > 0, and
/// `group_was`, the gradients a step of the intervals before, when the group has changed since.
inline std::string progress_line(HistoryRecord const& r, RunTotals const& totals,
                                 std::int64_t dropped = 0, std::int64_t group_was = 0) {
  std::ostringstream out;  // formatted apart, so the caller's stream keeps its settings
  detail::write_position(out, r, totals);
  char text[64];
  if (r.loss) {
    std::snprintf(text, sizeof text, "  loss %.4g", *r.loss);
    out << text;
  }
  if (r.samples_per_s) {
    std::snprintf(text, sizeof text, "  %.0f samples/s", *r.samples_per_s);
    out << text;
  }
  if (r.seconds_per_step) {
    std::snprintf(text, sizeof text, "  %.3g s/step", *r.seconds_per_step);
    out << text;
  }
  out << "  " << duration_text(r.elapsed_s) << " elapsed";
  if (totals.eta_s) out << ", ETA " << duration_text(*totals.eta_s, false);
  if (dropped > 0) out << "  (" << dropped << " late gradients dropped so far)";
  if (group_was > 0) out << "  (" << group_change(r, group_was) << ")";
  return out.str();
}

/// The line of an evaluation record: `epoch 3/20  step 1200/6000  validation loss 0.4021,
/// accuracy 0.8712`.
inline std::string evaluation_line(HistoryRecord const& r, RunTotals const& totals) {
  std::ostringstream out;
  detail::write_position(out, r, totals);
  char text[80];
  std::snprintf(text, sizeof text, "  validation loss %.4g, accuracy %.4f",
                r.val_loss().value_or(0.0), r.val_accuracy().value_or(0.0));
  out << text;
  return out.str();
}

/// TensorFlow's line for one update.
inline std::string tensorflow_line(StepReport const& report) {
  std::ostringstream line;
  line << "After " << report.local_step << " training steps (" << report.global_step
       << " global steps), loss on training batch is " << std::setprecision(4) << report.loss
       << " (" << std::setprecision(3) << report.seconds << " sec/batch)";
  if (report.dropped > 0) line << ", " << report.dropped << " late gradients dropped";
  return line.str();
}

}  // namespace convoy
