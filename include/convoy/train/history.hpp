// HistoryRecord: one row of what a training run did, kept by Trainer::fit in FitResult::history
// and handed to hooks: a progress interval (mean loss, throughput) or an evaluation (validation
// metrics). Its fields are the columns the metrics logger writes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "../core/batch.hpp"

namespace convoy {

/// What a record describes: the updates since the previous interval, or an evaluation.
enum class RecordKind { interval, evaluation };

/// One progress interval or one evaluation. Absent values are empty optionals: an evaluation has
/// no training loss or throughput, an interval no validation metrics.
struct HistoryRecord {
  RecordKind kind = RecordKind::interval;
  std::int64_t epoch = 1;               ///< the epoch the last step belongs to, counted from 1
  std::int64_t global_step = 0;         ///< global step at the end of the interval, or evaluated at
  double elapsed_s = 0.0;               ///< wall seconds since fit() started training
  std::optional<double> loss;           ///< mean training loss of the updates in the interval
  std::optional<double> samples_per_s;  ///< rows of applied gradients per wall second, interval
  std::optional<double> seconds_per_step;  ///< wall seconds per global step over the interval
  /// Gradients the interval's updates took, on average (gradients applied over global steps): the
  /// group's size in a synchronous run, which changes as workers are lost and come back.
  std::optional<double> gradients_per_step;
  float lr = 0.0f;                    ///< the optimizer's learning rate at the record
  std::optional<Metrics> validation;  ///< set for evaluations

  std::optional<double> val_loss() const {
    return validation ? std::optional<double>(validation->mean_loss()) : std::nullopt;
  }
  std::optional<double> val_accuracy() const {
    return validation ? std::optional<double>(validation->accuracy()) : std::nullopt;
  }
};

/// The records of one fit() call, in the order they were made.
using History = std::vector<HistoryRecord>;

}  // namespace convoy
