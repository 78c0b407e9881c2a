// Hooks: a richer callback than a plain step callback: optional functions called before the first
// step, after each update, at each progress interval, evaluation and epoch end, and after the
// last step; and RunControl, what a hook may do to the run it watches.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>

#include "../core/tensor.hpp"
#include "history.hpp"
#include "step.hpp"

namespace convoy {

/// What a hook may do to the run it watches. Given by Trainer::fit, valid only during that call;
/// used from the thread that calls the hook.
struct RunControl {
  /// Updates applied to the shared weights so far (Strategy::global_step).
  std::function<std::int64_t()> global_step;
  /// The optimizer's learning rate now.
  std::function<float()> learning_rate;
  /// Sets the learning rate for the steps that follow (Strategy::set_learning_rate; throws Error
  /// where the Comm cannot).
  std::function<void(float)> set_learning_rate;
  /// Every variable by name (Strategy::get_weights). Safe from any hook.
  std::function<std::map<std::string, Tensor>()> weights;
  /// The gradients of the last update by name (Strategy::get_gradients): in lock step, the mean
  /// of the replicas' gradients the optimizer applied; empty where the strategy cannot give them.
  std::function<std::map<std::string, Tensor>()> gradients;
  /// Saves the current weights by name, atomically (Trainer::save_weights). Blocks on file I/O.
  std::function<void(std::filesystem::path const&)> save_weights;
  /// Where fit writes its lines; null: nowhere.
  std::ostream* log = nullptr;
  /// Whether this task writes files that stand for the whole cluster (Strategy::chief).
  bool chief = true;
};

/// A set of optional hooks; each is called one call at a time, from fit's thread (on_check,
/// on_begin, on_end) or from the thread that completed the update (the others, as Callback).
/// Those returning bool stop the run by returning false: the steps already under way finish, and
/// fit returns normally.
struct Hooks {
  /// Before anything is trained or written, with fit's own option checks: throw Error to refuse
  /// the run (an output path that cannot be written).
  std::function<void(RunControl&)> on_check;
  /// Once checks passed and checkpoints were resumed, before the first step.
  std::function<void(RunControl&)> on_begin;
  /// After every update of the shared weights (see Callback).
  std::function<bool(StepReport const&, RunControl&)> on_step;
  /// After each progress interval (log_every steps; the rest of the run at its end).
  std::function<bool(HistoryRecord const&, RunControl&)> on_interval;
  /// After each evaluation of the validation set.
  std::function<bool(HistoryRecord const&, RunControl&)> on_evaluate;
  /// After the update that completes epoch `epoch` (counted from 1), and its evaluation if any.
  std::function<bool(std::int64_t epoch, RunControl&)> on_epoch_end;
  /// After the last step and the final evaluation, also when a hook stopped the run; not when
  /// training failed.
  std::function<void(RunControl&)> on_end;
};

}  // namespace convoy
