// Monitor: which validation metric a callback watches (loss or accuracy), which way is better, and
// by how much a value must beat the best so far to count as an improvement.
#pragma once

#include <cmath>
#include <optional>
#include <string_view>

#include "../history.hpp"

namespace convoy::callbacks {

enum class Metric { val_loss, val_accuracy };
/// min: lower is better; max: higher is better.
enum class Mode { min, max };

inline std::string_view metric_name(Metric metric) {
  return metric == Metric::val_loss ? "val_loss" : "val_accuracy";
}

/// A watched metric. `mode` defaults to min for val_loss and max for val_accuracy.
struct Monitor {
  Metric metric = Metric::val_loss;
  std::optional<Mode> mode{};
  double min_delta = 0.0;  ///< an improvement must beat the best by more than this (>= 0)

  Mode direction() const {
    return mode.value_or(metric == Metric::val_loss ? Mode::min : Mode::max);
  }
  /// The metric in `record`, absent when the record holds no evaluation.
  std::optional<double> value(HistoryRecord const& record) const {
    return metric == Metric::val_loss ? record.val_loss() : record.val_accuracy();
  }
  /// Whether `value` improves on `best` (any finite value improves on no best).
  bool improves(double value, std::optional<double> best) const {
    if (!std::isfinite(value)) return false;
    if (!best) return true;
    return direction() == Mode::min ? value < *best - min_delta : value > *best + min_delta;
  }
};

}  // namespace convoy::callbacks
