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
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../io/checkpoint.hpp"
#include "../io/dataset.hpp"
#include "../io/sampler.hpp"
#include "../optim/optimizer.hpp"
#include "step.hpp"

namespace convoy {

/// Called after every step, one call at a time, while no update is being applied; return false to
/// stop training. In lock-step runs every replica is at rest; in the others, replicas may be
/// computing on their own copies of the weights, so read Strategy::weights() or call
/// Trainer::evaluate, never a replica.
using Callback = std::function<bool(StepReport const&)>;

struct FitOptions {
  /// Progress to reach: steps (synchronous) or global steps (asynchronous); 0: use epochs.
  std::int64_t steps = 0;
  double epochs = 0.0;                      ///< used when steps is 0: passes over the training data
  std::size_t batch_size = 100;             ///< the global batch, split evenly over the replicas
  std::int64_t log_every = 100;             ///< progress line every this many steps; 0: quiet
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
  std::int64_t step = 0;
  std::int64_t global_step = 0;
  std::int64_t dropped = 0;
  float last_loss = 0.0f;
  double seconds = 0.0;             ///< wall time of this fit() call
  double samples_per_second = 0.0;  ///< rows trained on per second in this call
  std::optional<Metrics> validation;
};

/// Owns a Strategy and trains it. Not thread-safe; fit() blocks until training ends and rethrows
/// the first error a replica raised.
template <class S>
class Trainer {
 public:
  using Model = typename S::model_type;

  Trainer(S strategy, optim::Optimizer optimizer) : strategy_(std::move(strategy)) {
    strategy_.set_optimizer(optimizer);
    // Evaluation runs on a private copy of the model, made now while no replica computes, so it
    // never races a replica that is training.
    if constexpr (has_evaluate<Model>) evaluator_.emplace(strategy_.replica(0));
  }

  S& strategy() { return strategy_; }
  /// The trained model, between runs (see Strategy::model).
  Model& model() { return strategy_.model(); }

  /// Trains on `train` until options.steps (or epochs) is reached, resuming from a checkpoint first
  /// when asked. Throws Error for options that ask for no training or for validation of a model
  /// without evaluate(), DatasetError for data or a batch that does not fit, and CheckpointError or
  /// LoadError for a checkpoint that cannot be used.
  FitResult fit(io::Dataset const& train, FitOptions const& options = {}) {
    check(options);
    io::check(train);
    std::ostream* log = options.log;
    std::uint64_t seed = options.seed;
    if (options.resume && !options.checkpoint_dir.empty()) {
      if (auto latest = io::latest_checkpoint(options.checkpoint_dir)) {
        seed = restore(*latest);
        if (log) {
          *log << "convoy: resumed from " << latest->string() << " at step " << strategy_.step()
               << "\n";
        }
      }
    }
    io::Sampler const sampler(train.rows(), options.batch_size, strategy_.replicas(), seed);
    std::int64_t const until =
        options.steps > 0
            ? options.steps
            : static_cast<std::int64_t>(
                  std::ceil(options.epochs * strategy_.progress_per(sampler.steps_per_epoch())));

    std::vector<io::BatchBuffer> buffers(strategy_.replicas());
    FitResult result;
    std::int64_t const first_global = strategy_.global_step();
    auto const start = std::chrono::steady_clock::now();
    auto const rows_per_gradient = options.batch_size / strategy_.replicas();

    RunPlan plan;
    plan.until = until;
    plan.batch = [&](std::size_t replica, std::int64_t local_step) {
      return sampler.fill(train, replica, local_step, buffers[replica]);
    };
    plan.after_step = [&](StepReport const& report) {
      result.last_loss = report.loss;
      std::int64_t const progress = S::asynchronous() ? report.global_step : report.step;
      if (log && options.log_every > 0 && progress % options.log_every == 0) {
        std::int64_t const training_steps = S::asynchronous() ? report.local_step : report.step;
        std::ostringstream line;  // formatted apart, so the caller's stream keeps its settings
        line << "After " << training_steps << " training steps (" << report.global_step
             << " global steps), loss on training batch is " << std::setprecision(4) << report.loss
             << " (" << std::setprecision(3) << report.seconds << " sec/batch)";
        if (report.dropped > 0) line << ", " << report.dropped << " late gradients dropped";
        *log << line.str() << std::endl;
      }
      if (options.validation && options.evaluate_every > 0 &&
          progress % options.evaluate_every == 0) {
        auto const m = evaluate_if_possible(*options.validation);
        if (log) {
          *log << "  validation after " << progress << " steps: accuracy " << m.accuracy()
               << ", loss " << m.mean_loss() << std::endl;
        }
      }
      if (!options.checkpoint_dir.empty() && options.checkpoint_every > 0 &&
          progress % options.checkpoint_every == 0) {
        save_checkpoint(options.checkpoint_dir, seed);
      }
      bool keep_going = true;
      for (auto const& callback : options.callbacks) keep_going = callback(report) && keep_going;
      return keep_going;
    };
    strategy_.run(plan);

    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.step = strategy_.step();
    result.global_step = strategy_.global_step();
    result.dropped = strategy_.dropped();
    double const rows = static_cast<double>((result.global_step - first_global) *
                                            static_cast<std::int64_t>(rows_per_gradient));
    result.samples_per_second = result.seconds > 0 ? rows / result.seconds : 0.0;
    bool const saved_last_step =
        options.checkpoint_every > 0 && strategy_.progress() % options.checkpoint_every == 0;
    if (!options.checkpoint_dir.empty() && !saved_last_step) {
      save_checkpoint(options.checkpoint_dir, seed);
    }
    if (options.validation) result.validation = evaluate_if_possible(*options.validation);
    if (log) {
      std::ostringstream line;
      line << "convoy: " << result.step << " steps (" << result.global_step << " global steps) in "
           << std::setprecision(3) << result.seconds << " s, " << std::setprecision(6)
           << result.samples_per_second << " samples/sec";
      *log << line.str() << std::endl;
    }
    return result;
  }

  /// Metrics of the current weights over all of `data`, in batches of `batch_size` rows. Safe from
  /// a callback. Blocks.
  Metrics evaluate(io::Dataset const& data,
                   std::size_t batch_size = 1000) requires has_evaluate<Model> {
    evaluator_->variables().set_flat(strategy_.weights());
    Metrics total;
    for (std::size_t begin = 0; begin < data.rows(); begin += batch_size) {
      total += evaluator_->evaluate(data.slice(begin, std::min(batch_size, data.rows() - begin)));
    }
    return total;
  }

  /// Writes a checkpoint of the current state into `dir`; returns its path. Blocks while writing
  /// (in asynchronous runs every replica waits for it). Generator states are saved only in
  /// lock-step runs, where no replica is drawing from its generator meanwhile.
  std::filesystem::path save_checkpoint(std::filesystem::path const& dir, std::uint64_t data_seed) {
    auto& vars = layout();
    io::Checkpoint ck;
    auto& st = ck.state;
    st.weights = vars.named(strategy_.weights());
    st.optimizer = std::string(strategy_.optimizer().name());
    st.slots = optim::named_slots(strategy_.optimizer(), strategy_.optimizer_state(), vars);
    st.optimizer_updates = strategy_.optimizer_state().updates;
    st.counters = {strategy_.step(), strategy_.global_step(), strategy_.dropped(),
                   strategy_.replica_steps()};
    ck.data_seed = data_seed;
    if (strategy_.lock_step()) {
      std::istringstream lines(strategy_.generator_state());
      for (std::string line; std::getline(lines, line);) st.generators.push_back(line);
    }
    return io::save_checkpoint(dir, ck);
  }

  /// Restores weights, optimizer slots, counters and generator states from `file`; returns the
  /// data seed the checkpointed run used. Throws CheckpointError or LoadError naming what does not
  /// match.
  std::uint64_t restore(std::filesystem::path const& file) {
    io::Checkpoint const loaded = io::load_checkpoint(file);
    auto const& ck = loaded.state;
    auto& vars = layout();
    if (ck.optimizer != strategy_.optimizer().name()) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "' holds " + ck.optimizer +
                            " state but this run uses " +
                            std::string(strategy_.optimizer().name()));
    }
    if (ck.optimizer_updates < 0 || ck.counters.global_step < 0 || ck.counters.applied < 0 ||
        ck.counters.dropped < 0) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "' holds negative counters");
    }
    vars.check_names(ck.weights, "checkpoint '" + file.string() + "'");
    optim::set_named_slots(strategy_.optimizer(), strategy_.optimizer_state(), vars, ck.slots);
    std::vector<float> flat(vars.element_count());
    vars.assign_named(ck.weights, flat);
    strategy_.assign_weights(flat);
    strategy_.optimizer_state().updates = ck.optimizer_updates;
    strategy_.set_counters(ck.counters.global_step, ck.counters.applied, ck.counters.dropped,
                           ck.counters.local_steps);
    std::string generators;
    for (auto const& g : ck.generators) generators += g + "\n";
    strategy_.set_generator_state(generators);
    return loaded.data_seed;
  }

 private:
  // Replica 0's Variables, for names, shapes and offsets; its values are not read here.
  Variables& layout() { return strategy_.replica(0).variables(); }

  // evaluate() for models that have it; check() refuses validation for the others.
  Metrics evaluate_if_possible(io::Dataset const& data) {
    if constexpr (has_evaluate<Model>) {
      return evaluate(data);
    } else {
      return Metrics{};
    }
  }

  static void check(FitOptions const& options) {
    if (options.steps < 0 || !(options.epochs >= 0.0) ||
        (options.steps == 0 && options.epochs == 0.0)) {
      throw Error("convoy: fit needs steps > 0 or epochs > 0 (got steps " +
                  std::to_string(options.steps) + ", epochs " + std::to_string(options.epochs) +
                  ")");
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
