// FitOptions and FitResult: what Trainer::fit is asked to do and what it reports; Callback, the
// plain function it calls after every update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <vector>

#include "../core/batch.hpp"
#include "../io/dataset.hpp"
#include "history.hpp"
#include "hooks.hpp"
#include "progress.hpp"
#include "step.hpp"

namespace convoy {

/// Called after every update of the shared weights, one call at a time; return false to stop
/// training. In lock-step runs every replica is at rest; in the others, replicas may be computing
/// on their own copies of the weights, so read Strategy::weights(), take a snapshot or call
/// Trainer::evaluate, never a replica.
using Callback = std::function<bool(StepReport const&)>;

struct FitOptions {
  /// Global steps to reach (updates of the shared weights, under every policy); 0: use epochs.
  std::int64_t steps = 0;
  double epochs = 0.0;           ///< used when steps is 0: passes over the training data
  std::size_t batch_size = 100;  ///< the global batch, split evenly over the replicas
  /// When the group re-forms mid-run (comm::Gloo, after a loss or a join) or a synchronous ps
  /// cluster goes on without a worker (comm::ZmqPs, every worker counted): false keeps each
  /// replica's batch, so the global batch follows the group's size (as Horovod); true keeps the
  /// global batch, split over the replicas as evenly as the rows allow (on the ps, as evenly as
  /// the workers' slices of it allow).
  bool keep_global_batch = false;
  std::int64_t log_every = 100;    ///< progress line every this many global steps; 0: quiet
  std::ostream* log = &std::cout;  ///< where progress goes; null: nowhere
  LogFormat log_format = LogFormat::progress;  ///< progress lines, or TensorFlow's (progress.hpp)
  std::uint64_t seed = 1;                      ///< data order
  std::filesystem::path checkpoint_dir{};      ///< empty: no checkpoints
  std::int64_t checkpoint_every = 0;           ///< 0: only at the end (when checkpoint_dir is set)
  bool resume = true;                          ///< continue from checkpoint_dir's latest checkpoint
  /// Evaluated every evaluate_every steps, at each epoch's end when evaluate_each_epoch, and at
  /// the end of the run.
  io::Dataset const* validation = nullptr;
  std::int64_t evaluate_every = 0;
  bool evaluate_each_epoch = false;
  std::vector<Callback> callbacks{};  ///< called after every update, after the hooks' records
  std::vector<Hooks> hooks{};  ///< metrics logs, schedules, early stopping... (train/callbacks/)
};

struct FitResult {
  std::int64_t global_step = 0;  ///< updates applied to the shared weights, in all
  std::int64_t applied = 0;      ///< gradients applied, in all
  std::int64_t dropped = 0;      ///< late gradients dropped, in all
  double epochs = 0.0;           ///< passes over the training data, in all
  float last_loss = 0.0f;
  double seconds = 0.0;               ///< wall time of this fit() call
  double samples_per_second = 0.0;    ///< rows of applied gradients per second in this call
  std::optional<Metrics> validation;  ///< of the final weights
  /// One record per progress interval (every log_every global steps, whether or not a log is
  /// given, and the rest of the run at its end) and per evaluation, in order.
  History history;
};

}  // namespace convoy
