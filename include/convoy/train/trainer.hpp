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

/// Called after every step with the weights consistent; return false to stop training.
using Callback = std::function<bool(StepReport const&)>;

struct FitOptions {
  std::int64_t steps =
      0;                ///< progress to reach: steps (synchronous) or global steps (asynchronous)
  double epochs = 0.0;  ///< used when steps is 0: passes over the training data
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
  }

  S& strategy() { return strategy_; }
  Model& model() { return strategy_.model(); }

  /// Trains on `train` until options.steps (or epochs) is reached, resuming from a checkpoint first
  /// when asked. Throws DatasetError for a batch that does not fit the data or the replicas, and
  /// CheckpointError for a checkpoint that cannot be used.
  FitResult fit(io::Dataset const& train, FitOptions const& options = {}) {
    std::ostream* log = options.log;
    std::uint64_t seed = options.seed;
    if (options.resume && !options.checkpoint_dir.empty()) {
      if (auto latest = io::latest_checkpoint(options.checkpoint_dir)) {
        seed = restore(*latest);
        if (log)
          *log << "convoy: resumed from " << latest->string() << " at step " << strategy_.step()
               << "\n";
      }
    }
    io::Sampler const sampler(train.rows(), options.batch_size, strategy_.replicas(), seed);
    std::int64_t until = options.steps;
    if (until == 0) {
      double const units = options.epochs * static_cast<double>(train.rows()) /
                           static_cast<double>(strategy_.rows_per_progress(options.batch_size));
      until = static_cast<std::int64_t>(std::ceil(units));
    }

    if (options.validation)
      ensure_evaluator();  // before the replicas start: the copy reads replica 0
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
        *log << "After " << training_steps << " training steps (" << report.global_step
             << " global steps), loss on training batch is " << std::setprecision(4) << report.loss
             << " (" << std::setprecision(3) << report.seconds << " sec/batch)";
        if (report.dropped > 0) *log << ", " << report.dropped << " late gradients dropped";
        *log << std::endl;
      }
      if (options.validation && options.evaluate_every > 0 &&
          progress % options.evaluate_every == 0) {
        auto const m = evaluate_weights(*options.validation, strategy_.weights());
        if (log)
          *log << "  validation after " << progress << " steps: accuracy " << m.accuracy()
               << ", loss " << m.mean_loss() << std::endl;
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
    if (!options.checkpoint_dir.empty() && !saved_last_step)
      save_checkpoint(options.checkpoint_dir, seed);
    if (options.validation) result.validation = evaluate(*options.validation);
    if (log) {
      *log << "convoy: " << result.step << " steps (" << result.global_step << " global steps) in "
           << std::setprecision(3) << result.seconds << " s, " << std::setprecision(6)
           << result.samples_per_second << " samples/sec" << std::endl;
    }
    return result;
  }

  /// Metrics of the current weights over all of `data`, in batches of `batch_size` rows.
  Metrics evaluate(io::Dataset const& data,
                   std::size_t batch_size = 1000) requires has_evaluate<Model> {
    return evaluate_weights(data, strategy_.weights(), batch_size);
  }

  /// Writes a checkpoint of the current state into `dir`; returns its path. Blocks while writing.
  std::filesystem::path save_checkpoint(std::filesystem::path const& dir, std::uint64_t data_seed) {
    auto& vars = layout();
    io::Checkpoint ck;
    auto const weights = strategy_.weights();
    for (auto const& v : vars.list()) {
      ck.weights.emplace(
          v.name,
          Tensor{v.shape, std::vector<float>(
                              weights.begin() + static_cast<std::ptrdiff_t>(v.offset),
                              weights.begin() + static_cast<std::ptrdiff_t>(v.offset + v.size))});
    }
    ck.optimizer = std::string(strategy_.optimizer().name());
    ck.slots = optim::named_slots(strategy_.optimizer(), strategy_.optimizer_state(), vars);
    ck.optimizer_updates = strategy_.optimizer_state().updates;
    ck.step = strategy_.step();
    ck.global_step = strategy_.global_step();
    ck.replica_steps = strategy_.replica_steps();
    ck.data_seed = data_seed;
    std::ostringstream rng;
    rng << vars.rng();
    ck.rng_state = rng.str();
    return io::save_checkpoint(dir, ck);
  }

  /// Restores weights, optimizer slots, counters and generator state from `file`; returns the data
  /// seed the checkpointed run used. Throws CheckpointError or LoadError naming what does not
  /// match.
  std::uint64_t restore(std::filesystem::path const& file) {
    io::Checkpoint ck = io::load_checkpoint(file);
    auto& vars = layout();
    if (ck.optimizer != strategy_.optimizer().name()) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "' holds " + ck.optimizer +
                            " state but this run uses " +
                            std::string(strategy_.optimizer().name()));
    }
    vars.check_names(ck.weights, "checkpoint '" + file.string() + "'");
    optim::set_named_slots(strategy_.optimizer(), strategy_.optimizer_state(), vars, ck.slots);
    std::vector<float> flat(vars.element_count());
    for (auto const& v : vars.list()) {
      auto const& t = ck.weights.at(v.name);
      std::copy(t.data.begin(), t.data.end(), flat.begin() + static_cast<std::ptrdiff_t>(v.offset));
    }
    strategy_.assign_weights(flat);
    strategy_.optimizer_state().updates = ck.optimizer_updates;
    strategy_.set_counters(ck.step, ck.global_step, ck.replica_steps);
    for (std::size_t r = 0; r < strategy_.replicas(); ++r) {
      std::istringstream rng(ck.rng_state);
      rng >> strategy_.replica(r).variables().rng();
    }
    return ck.data_seed;
  }

 private:
  // Replica 0's Variables, for names, shapes and offsets; its values are not read here.
  Variables& layout() { return strategy_.replica(0).variables(); }

  // Evaluation runs on a private copy of the model, so it never races a replica that is training.
  Metrics evaluate_weights(io::Dataset const& data, std::span<float const> weights,
                           std::size_t batch_size = 1000) {
    if constexpr (has_evaluate<Model>) {
      ensure_evaluator();
      evaluator_->variables().set_flat(weights);
      Metrics total;
      for (std::size_t begin = 0; begin < data.rows(); begin += batch_size) {
        total += evaluator_->evaluate(data.slice(begin, std::min(batch_size, data.rows() - begin)));
      }
      return total;
    } else {
      return Metrics{};
    }
  }

  void ensure_evaluator() {
    if (!evaluator_) evaluator_.emplace(strategy_.replica(0));
  }

  S strategy_;
  std::optional<Model> evaluator_;
};

}  // namespace convoy
