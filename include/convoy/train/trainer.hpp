// Trainer: the training loop around a Strategy: data order, progress lines in the shape
// TensorFlow's examples print, periodic evaluation, callbacks, and checkpoints that let a killed
// run resume exactly where it stopped.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../io/checkpoint.hpp"
#include "../io/dataset.hpp"
#include "../io/sampler.hpp"
#include "../optim/optimizer.hpp"
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
  double epochs = 0.0;                      ///< used when steps is 0: passes over the training data
  std::size_t batch_size = 100;             ///< the global batch, split evenly over the replicas
  std::int64_t log_every = 100;             ///< progress line every this many global steps; 0: quiet
  std::ostream* log = &std::cout;           ///< where progress goes; null: nowhere
  std::uint64_t seed = 1;                   ///< data order
  std::filesystem::path checkpoint_dir{};   ///< empty: no checkpoints
  std::int64_t checkpoint_every = 0;        ///< 0: only at the end (when checkpoint_dir is set)
  bool resume = true;                       ///< continue from checkpoint_dir's latest checkpoint
  io::Dataset const* validation = nullptr;  ///< evaluated every evaluate_every steps and at the end
  std::int64_t evaluate_every = 0;
  std::vector<Callback> callbacks{};
};

struct FitResult {
  std::int64_t global_step = 0;  ///< updates applied to the shared weights, in all
  std::int64_t applied = 0;      ///< gradients applied, in all
  std::int64_t dropped = 0;      ///< late gradients dropped, in all
  double epochs = 0.0;           ///< passes over the training data, in all
  float last_loss = 0.0f;
  double seconds = 0.0;             ///< wall time of this fit() call
  double samples_per_second = 0.0;  ///< rows of applied gradients per second in this call
  std::optional<Metrics> validation;
};

/// Owns a Strategy and trains it. It reads and writes the strategy's state only by name, through
/// snapshot() and restore(). Not thread-safe; fit() blocks until training ends and rethrows the
/// first error a replica raised.
template <class S>
class Trainer {
 public:
  using Model = typename S::model_type;

  Trainer(S strategy, optim::Optimizer optimizer) : strategy_(std::move(strategy)) {
    strategy_.set_optimizer(optimizer);
    // Evaluation runs on a private copy of the model, made now while no replica computes, so it
    // never races a replica that is training.
    if constexpr (has_evaluate<Model>) evaluator_.emplace(strategy_.model());
  }

  S& strategy() { return strategy_; }
  S const& strategy() const { return strategy_; }
  /// The trained model, read-only, between runs (see Strategy::model).
  Model const& model() const { return strategy_.model(); }

  /// Every variable by name.
  std::map<std::string, Tensor> get_weights() const { return strategy_.get_weights(); }
  /// Sets every variable by name in every replica (see Strategy::set_weights).
  void set_weights(std::map<std::string, Tensor> const& named) { strategy_.set_weights(named); }
  /// Saves the weights by name to `path` (format from the extension unless given), atomically.
  void save_weights(std::filesystem::path const& path, std::optional<io::Format> format = {}) const {
    io::save_named(path, get_weights(), format ? *format : io::format_for(path));
  }
  /// Loads weights saved by name into every replica. Throws LoadError naming the path and every
  /// unknown, missing or mis-shaped name; nothing changes on error.
  void load_weights(std::filesystem::path const& path, std::optional<io::Format> format = {}) {
    auto const named = io::load_named(path, format ? *format : io::format_for(path));
    strategy_.layout().check_names(named, "loading '" + path.string() + "'");
    set_weights(named);
  }

  /// Trains on `train` until options.steps global steps (or options.epochs passes over the data)
  /// are reached, resuming from the latest checkpoint first when asked. Throws Error for options
  /// that ask for no training, for validation of a model without evaluate(), or for a checkpoint
  /// directory that cannot be written (before the first step); DatasetError for data or a batch
  /// that does not fit; CheckpointError or LoadError for a checkpoint that cannot be used. `train`
  /// must outlive the strategy's replicas' use of it (fit's return, or an abandoned replica's).
  FitResult fit(io::Dataset const& train, FitOptions const& options = {}) {
    check(options);
    io::check(train);
    std::ostream* log = options.log;
    std::uint64_t seed = options.seed;
    // In a cluster only the chief reads and writes checkpoints: the shards hold one state.
    bool const checkpoints = !options.checkpoint_dir.empty() && strategy_.chief();
    if (checkpoints) {
      // Refused now rather than after the last step; and what a killed writer left is cleared.
      io::require_writable_directory(options.checkpoint_dir, "checkpoint directory");
      io::remove_stale_temporaries(options.checkpoint_dir);
      if (options.resume) {
        std::ostream* warnings = log ? log : &std::clog;
        if (auto latest = io::load_latest_checkpoint(options.checkpoint_dir, warnings)) {
          seed = restore(*latest);
          if (log) {
            *log << "convoy: resumed from " << latest->file.string() << " at global step "
                 << strategy_.global_step() << "\n";
          }
        }
      }
    }
    auto const replicas = strategy_.replicas();
    io::Sampler const sampler(train.rows(), options.batch_size, replicas, seed);
    auto const batches_per_epoch =
        static_cast<double>(sampler.steps_per_epoch()) * static_cast<double>(replicas);

    RunPlan plan;
    if (options.steps > 0) {
      plan.until = options.steps;
    } else {
      plan.until_batches = static_cast<std::int64_t>(std::ceil(
                               options.epochs * static_cast<double>(sampler.steps_per_epoch()))) *
                           static_cast<std::int64_t>(replicas);
    }
    // The buffers belong to the plan, so a replica abandoned mid-step still reads live memory.
    auto buffers = std::make_shared<std::vector<io::BatchBuffer>>(replicas);
    plan.batch = [&train, sampler, buffers](std::size_t replica, std::int64_t local_step) {
      return sampler.fill(train, replica, local_step, (*buffers)[replica]);
    };
    FitResult result;
    if (strategy_.serves()) return serve(plan, log);
    Counters const before = strategy_.counters();
    auto const start = std::chrono::steady_clock::now();
    // A cluster's worker hears only of its own updates, so a multiple of `every` may pass unseen:
    // there a periodic action fires at the first step past it.
    bool const sees_every_update = strategy_.sees_every_update();
    std::int64_t previous = before.global_step;
    auto due = [&](std::int64_t step, std::int64_t every) {
      if (every <= 0) return false;
      return sees_every_update ? step % every == 0 : step / every > previous / every;
    };
    plan.after_step = [&](StepReport const& report) {
      result.last_loss = report.loss;
      std::int64_t const step = report.global_step;
      struct Advance {  // `previous` moves on however the callback ends
        std::int64_t& previous;
        std::int64_t step;
        ~Advance() { previous = std::max(previous, step); }
      } const advance{previous, step};
      if (log && due(step, options.log_every)) {
        std::ostringstream line;  // formatted apart, so the caller's stream keeps its settings
        line << "After " << report.local_step << " training steps (" << step
             << " global steps), loss on training batch is " << std::setprecision(4) << report.loss
             << " (" << std::setprecision(3) << report.seconds << " sec/batch)";
        if (report.dropped > 0) line << ", " << report.dropped << " late gradients dropped";
        *log << line.str() << std::endl;
      }
      if (options.validation && due(step, options.evaluate_every)) {
        auto const m = evaluate_if_possible(*options.validation);
        if (log) {
          *log << "  validation after " << step << " steps: accuracy " << m.accuracy() << ", loss "
               << m.mean_loss() << std::endl;
        }
      }
      if (checkpoints && due(step, options.checkpoint_every)) {
        save_checkpoint(options.checkpoint_dir, seed);
      }
      bool keep_going = true;
      for (auto const& callback : options.callbacks) keep_going = callback(report) && keep_going;
      return keep_going;
    };
    try {
      strategy_.run(plan);
    } catch (ReplicaError const&) {
      // The surviving replicas trained on: keep their work before reporting the failures.
      if (checkpoints) save_checkpoint(options.checkpoint_dir, seed);
      throw;
    }

    auto const& after = strategy_.counters();
    count(result, start);
    result.epochs = static_cast<double>(after.batches()) / batches_per_epoch;
    // Rows of applied gradients only: a dropped gradient trained nothing.
    double const rows = static_cast<double>(after.applied - before.applied) *
                        static_cast<double>(sampler.rows_per_replica());
    result.samples_per_second = result.seconds > 0 ? rows / result.seconds : 0.0;
    bool const saved_last_step =
        options.checkpoint_every > 0 && after.global_step % options.checkpoint_every == 0 &&
        after.global_step != before.global_step;
    if (checkpoints && !saved_last_step) {
      save_checkpoint(options.checkpoint_dir, seed);
    }
    if (options.validation) result.validation = evaluate_if_possible(*options.validation);
    if (log) {
      std::ostringstream line;
      line << "convoy: " << result.global_step << " global steps (" << result.applied
           << " gradients applied";
      if (result.dropped > 0) line << ", " << result.dropped << " dropped";
      line << ", " << std::setprecision(3) << result.epochs << " epochs) in " << result.seconds
           << " s, " << std::setprecision(6) << result.samples_per_second << " samples/sec";
      *log << line.str() << std::endl;
    }
    return result;
  }

  /// Metrics of the current weights over all of `data`, in batches of `batch_size` rows. Safe from
  /// a callback. Blocks. Throws Error for a batch size of 0.
  Metrics evaluate(io::Dataset const& data,
                   std::size_t batch_size = 1000) requires has_evaluate<Model> {
    if (batch_size == 0) throw Error("convoy: Trainer::evaluate needs a batch size of at least 1");
    io::check(data);
    strategy_.read_weights(evaluator_->variables().weights());  // one copy, no allocation
    Metrics total;
    for (std::size_t begin = 0; begin < data.rows(); begin += batch_size) {
      total += evaluator_->evaluate(data.slice(begin, std::min(batch_size, data.rows() - begin)));
    }
    return total;
  }

  /// Writes a checkpoint of the strategy's snapshot into `dir`; returns its path. Blocks while
  /// writing (in asynchronous runs every replica that finishes a step meanwhile waits for it).
  std::filesystem::path save_checkpoint(std::filesystem::path const& dir, std::uint64_t data_seed) {
    // A cluster's shards write their own parts, committed by the chief's manifest.
    if constexpr (requires { strategy_.engine().state().save_checkpoint(dir, data_seed); }) {
      return strategy_.engine().state().save_checkpoint(dir, data_seed);
    } else {
      return io::save_checkpoint(dir, io::Checkpoint{strategy_.snapshot(), data_seed});
    }
  }

  /// Restores weights, optimizer slots, counters and generator states from `file`; returns the
  /// data seed the checkpointed run used. Throws CheckpointError or LoadError naming the file and
  /// what does not match; nothing changes then.
  std::uint64_t restore(std::filesystem::path const& file) {
    return restore(io::LoadedCheckpoint{file, io::load_checkpoint(file)});
  }
  /// The same, for a checkpoint already read (io::load_latest_checkpoint).
  std::uint64_t restore(io::LoadedCheckpoint const& loaded) {
    auto const& file = loaded.file;
    auto const& state = loaded.checkpoint.state;
    if (state.optimizer != strategy_.optimizer().name()) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "' holds " + state.optimizer +
                            " state but this run uses " +
                            std::string(strategy_.optimizer().name()));
    }
    try {
      strategy_.restore(state);
    } catch (LoadError const& e) {
      throw LoadError("convoy: checkpoint '" + file.string() + "': " + e.what());
    } catch (Error const& e) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "': " + e.what());
    }
    return loaded.checkpoint.data_seed;
  }

 private:
  // The counters and the wall time since `start` into `result`.
  void count(FitResult& result, std::chrono::steady_clock::time_point start) const {
    auto const& after = strategy_.counters();
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.global_step = after.global_step;
    result.applied = after.applied;
    result.dropped = after.dropped;
  }

  // A cluster's ps task: serves its shard until every worker is done.
  FitResult serve(RunPlan const& plan, std::ostream* log) {
    auto const start = std::chrono::steady_clock::now();
    strategy_.run(plan);
    FitResult result;
    count(result, start);
    if (log) {
      *log << "convoy: served " << result.global_step << " global steps in " << result.seconds
           << " s" << std::endl;
    }
    return result;
  }

  // evaluate() for models that have it; check() refuses validation for the others.
  Metrics evaluate_if_possible(io::Dataset const& data) {
    if constexpr (has_evaluate<Model>) {
      return evaluate(data);
    } else {
      return Metrics{};
    }
  }

  static void check(FitOptions const& options) {
    if (options.steps < 0 || !(options.epochs >= 0.0) || !std::isfinite(options.epochs) ||
        (options.steps == 0 && options.epochs == 0.0)) {
      throw Error("convoy: fit needs steps > 0 or epochs > 0 (got steps " +
                  std::to_string(options.steps) + ", epochs " + std::to_string(options.epochs) +
                  ")");
    }
    if (options.log_every < 0 || options.checkpoint_every < 0 || options.evaluate_every < 0) {
      throw Error("convoy: fit's log_every, checkpoint_every and evaluate_every must be >= 0");
    }
    if (options.validation && !has_evaluate<Model>) {
      throw Error(
          "convoy: FitOptions::validation needs a model with "
          "'convoy::Metrics evaluate(convoy::Batch const&)'");
    }
  }

  S strategy_;
  std::optional<Model> evaluator_;
};

}  // namespace convoy
