// Trainer: the training loop around a Strategy: data order, progress lines (or those TensorFlow's
// examples print), a history of the run, periodic and per-epoch evaluation, callbacks and hooks,
// and checkpoints that let a killed run resume exactly where it stopped.
#pragma once

#include <algorithm>
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
#include <thread>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/snapshot.hpp"
#include "../io/checkpoint.hpp"
#include "../io/dataset.hpp"
#include "../io/sampler.hpp"
#include "../io/weights.hpp"
#include "../optim/optimizer.hpp"
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
  double epochs = 0.0;             ///< used when steps is 0: passes over the training data
  std::size_t batch_size = 100;    ///< the global batch, split evenly over the replicas
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
  void save_weights(std::filesystem::path const& path,
                    std::optional<io::Format> format = {}) const {
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
  /// directory or a hook's output path that cannot be written (before the first step);
  /// DatasetError for data or a batch that does not fit; CheckpointError or LoadError for a
  /// checkpoint that cannot be used. `train` must outlive the strategy's replicas' use of it
  /// (fit's return, or an abandoned replica's).
  FitResult fit(io::Dataset const& train, FitOptions const& options = {}) {
    check(options);
    io::check(train);
    std::ostream* log = options.log;
    std::uint64_t seed = options.seed;
    RunControl control = make_control(log);
    // Every output path is refused now rather than after the last step.
    for (auto const& hooks : options.hooks) {
      if (hooks.on_check) hooks.on_check(control);
    }
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
        static_cast<std::int64_t>(sampler.steps_per_epoch()) * static_cast<std::int64_t>(replicas);

    RunPlan plan;
    if (options.steps > 0) {
      plan.until = options.steps;
    } else {
      plan.until_batches = static_cast<std::int64_t>(std::ceil(
                               options.epochs * static_cast<double>(sampler.steps_per_epoch()))) *
                           static_cast<std::int64_t>(replicas);
    }
    // The buffers belong to the plan, so a replica abandoned mid-step still reads live memory.
    auto buffers = std::make_shared<std::vector<io::BatchBuffer>>();
    buffers->reserve(replicas);
    for (std::size_t r = 0; r < replicas; ++r) buffers->emplace_back(strategy_.batch_memory(r));
    // A replica on a GPU gathers its rows on its share of the host's cores, which it leaves idle:
    // its step is shorter than a one-core gather. On the host the replicas use the cores.
    std::vector<int> gather_threads(replicas, 1);
    for (std::size_t r = 0; r < replicas; ++r) {
      if (strategy_.on_device(r)) {
        gather_threads[r] = static_cast<int>(std::clamp<std::size_t>(
            std::max(1u, std::thread::hardware_concurrency()) / replicas, 1, 8));
      }
    }
    plan.batch = [&train, sampler, buffers, gather_threads](std::size_t replica,
                                                             std::int64_t local_step) {
      return sampler.fill(train, replica, local_step, (*buffers)[replica], gather_threads[replica]);
    };
    FitResult result;
    if (strategy_.serves()) return serve(plan, log);
    Counters const before = strategy_.counters();
    auto const start = std::chrono::steady_clock::now();
    Progress progress{.plan = plan,
                      .start_step = before.global_step,
                      .start_batches = before.batches(),
                      .batches_per_epoch = batches_per_epoch,
                      .rows_per_gradient = static_cast<double>(sampler.rows_per_replica()),
                      .lock_step_batches = strategy_.lock_step() ? std::int64_t(replicas) : 0,
                      .start = start,
                      .interval = {start, before.global_step, before.applied}};
    bool const progress_lines = log && options.log_format == LogFormat::progress;
    bool keep_going = true;  // false once a hook asked to stop

    // An evaluation: recorded, printed, and handed to the hooks.
    std::optional<HistoryRecord> last_evaluation;
    auto evaluate_now = [&](std::int64_t step, std::int64_t batches, bool tensorflow_line) {
      HistoryRecord record = progress.record(RecordKind::evaluation, step, batches);
      record.lr = strategy_.optimizer().learning_rate();
      record.validation = evaluate_if_possible(*options.validation);
      if (log && tensorflow_line) {
        *log << "  validation after " << step << " steps: accuracy "
             << record.validation->accuracy() << ", loss " << record.validation->mean_loss()
             << std::endl;
      } else if (progress_lines) {
        *log << evaluation_line(record, progress.totals(step, batches)) << std::endl;
      }
      result.history.push_back(record);
      last_evaluation = record;
      for (auto const& hooks : options.hooks) {
        if (hooks.on_evaluate) keep_going = hooks.on_evaluate(record, control) && keep_going;
      }
    };
    // The interval since the last record: recorded, printed, and handed to the hooks.
    auto close_interval = [&](std::int64_t step, std::int64_t batches, std::int64_t applied,
                              std::int64_t dropped) {
      HistoryRecord record = progress.close_interval(step, batches, applied);
      record.lr = strategy_.optimizer().learning_rate();
      if (progress_lines) {
        *log << progress_line(record, progress.totals(step, batches), dropped) << std::endl;
      }
      result.history.push_back(record);
      for (auto const& hooks : options.hooks) {
        if (hooks.on_interval) keep_going = hooks.on_interval(record, control) && keep_going;
      }
    };

    for (auto const& hooks : options.hooks) {
      if (hooks.on_begin) hooks.on_begin(control);
    }
    // A cluster's worker hears only of its own updates, so a multiple of `every` may pass unseen:
    // there a periodic action fires at the first step past it.
    bool const sees_every_update = strategy_.sees_every_update();
    std::int64_t previous = before.global_step;
    std::int64_t previous_batches = before.batches();
    auto due = [&](std::int64_t step, std::int64_t every) {
      if (every <= 0) return false;
      return sees_every_update ? step % every == 0 : step / every > previous / every;
    };
    plan.after_step = [&](StepReport const& report) {
      result.last_loss = report.loss;
      std::int64_t const step = report.global_step;
      struct Advance {  // `previous` moves on however the callback ends
        std::int64_t& previous;
        std::int64_t& previous_batches;
        std::int64_t step;
        std::int64_t batches;
        ~Advance() {
          previous = std::max(previous, step);
          previous_batches = std::max(previous_batches, batches);
        }
      } const advance{previous, previous_batches, step, report.batches};
      progress.add_loss(report.loss);
      if (log && options.log_format == LogFormat::tensorflow && due(step, options.log_every)) {
        *log << tensorflow_line(report) << std::endl;
      }
      // The step that reaches the goal closes the last interval, before its evaluation.
      if (due(step, options.log_every) || plan.reached(step, report.batches)) {
        close_interval(step, report.batches, report.applied, report.dropped);
      }
      // Whole epochs completed, by the data used: the update that crosses a multiple ends one.
      bool const epoch_ended =
          report.batches / batches_per_epoch > previous_batches / batches_per_epoch;
      if (options.validation &&
          (due(step, options.evaluate_every) || (options.evaluate_each_epoch && epoch_ended))) {
        evaluate_now(step, report.batches, options.log_format == LogFormat::tensorflow);
      }
      if (epoch_ended) {
        std::int64_t const epoch = report.batches / batches_per_epoch;
        for (auto const& hooks : options.hooks) {
          if (hooks.on_epoch_end) keep_going = hooks.on_epoch_end(epoch, control) && keep_going;
        }
      }
      if (checkpoints && due(step, options.checkpoint_every)) {
        save_checkpoint(options.checkpoint_dir, seed);
      }
      for (auto const& callback : options.callbacks) keep_going = callback(report) && keep_going;
      for (auto const& hooks : options.hooks) {
        if (hooks.on_step) keep_going = hooks.on_step(report, control) && keep_going;
      }
      return keep_going;
    };
    for (;;) {
      try {
        strategy_.run(plan);
        break;
      } catch (ReplicaError const&) {
        // The surviving replicas trained on: keep their work before reporting the failures.
        if (checkpoints) save_checkpoint(options.checkpoint_dir, seed);
        throw;
      } catch (StateLostError const& e) {
        // A parameter-server shard lost its state: the chief rolls the cluster back to the latest
        // committed checkpoint, so nothing it holds is lost, and trains on from there.
        if (!checkpoints) {
          throw StateLostError(std::string(e.what()) + "; without checkpoints to roll back to "
                               "(FitOptions::checkpoint_dir) the run cannot go on");
        }
        auto latest = io::load_latest_checkpoint(options.checkpoint_dir, log ? log : &std::clog);
        if (!latest) {
          throw StateLostError(std::string(e.what()) + "; '" + options.checkpoint_dir.string() +
                               "' holds no checkpoint to roll back to yet");
        }
        if (log) *log << e.what() << std::endl;
        restore(*latest);
        // The steps after the checkpoint are trained again: so are their logs and checkpoints.
        previous = strategy_.global_step();
        previous_batches = strategy_.counters().batches();
        if (log) {
          *log << "convoy: rolled back to " << latest->file.string() << " at global step "
               << strategy_.global_step() << std::endl;
        }
      }
    }

    auto const& after = strategy_.counters();
    count(result, start);
    result.epochs = static_cast<double>(after.batches()) / static_cast<double>(batches_per_epoch);
    // Rows of applied gradients only: a dropped gradient trained nothing.
    double const rows = static_cast<double>(after.applied - before.applied) *
                        static_cast<double>(sampler.rows_per_replica());
    result.samples_per_second = result.seconds > 0 ? rows / result.seconds : 0.0;
    // The steps since the last interval make one more, so the history covers the whole run.
    if (after.global_step > progress.interval.step) {
      close_interval(after.global_step, after.batches(), after.applied, after.dropped);
    }
    bool const saved_last_step = options.checkpoint_every > 0 &&
                                 after.global_step % options.checkpoint_every == 0 &&
                                 after.global_step != before.global_step;
    if (checkpoints && !saved_last_step) {
      save_checkpoint(options.checkpoint_dir, seed);
    }
    if (options.validation) {
      // An evaluation of these very weights already made at the last step is not repeated.
      if (!last_evaluation || last_evaluation->global_step != after.global_step) {
        evaluate_now(after.global_step, after.batches(), false);
      }
      result.validation = last_evaluation->validation;
    }
    for (auto const& hooks : options.hooks) {
      if (hooks.on_end) hooks.on_end(control);
    }
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

  // What fit's hooks may do: reach back into this trainer.
  RunControl make_control(std::ostream* log) {
    RunControl control;
    control.global_step = [this] { return strategy_.global_step(); };
    control.learning_rate = [this] { return strategy_.optimizer().learning_rate(); };
    control.set_learning_rate = [this](float rate) { strategy_.set_learning_rate(rate); };
    control.weights = [this] { return strategy_.get_weights(); };
    control.gradients = [this] { return strategy_.get_gradients(); };
    control.save_weights = [this](std::filesystem::path const& path) { save_weights(path); };
    control.log = log;
    control.chief = strategy_.chief();
    return control;
  }

  // Where a run stands: the interval since the last record, epochs, totals and the ETA. Written
  // from after_step, one call at a time.
  struct Progress {
    using Clock = std::chrono::steady_clock;
    struct Interval {
      Clock::time_point time;
      std::int64_t step = 0;
      std::int64_t applied = 0;
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

    void add_loss(float loss) {
      interval.loss_sum += static_cast<double>(loss);
      ++interval.losses;
    }
    // Batches per global step: exact in lock step, else as measured in this run.
    double batches_per_step(std::int64_t step, std::int64_t batches) const {
      if (lock_step_batches > 0) return static_cast<double>(lock_step_batches);
      if (step <= start_step || batches <= start_batches) return 1.0;
      return static_cast<double>(batches - start_batches) / static_cast<double>(step - start_step);
    }
    RunTotals totals(std::int64_t step, std::int64_t batches) const {
      RunTotals t;
      double const per_step = batches_per_step(step, batches);
      double total_batches = 0.0, done = 0.0;
      if (plan.until > 0) {
        t.steps = plan.until;
        total_batches = static_cast<double>(start_batches) +
                        static_cast<double>(plan.until - start_step) * per_step;
        if (plan.until > start_step) {
          done =
              static_cast<double>(step - start_step) / static_cast<double>(plan.until - start_step);
        }
      } else {
        total_batches = static_cast<double>(plan.until_batches);
        t.steps =
            start_step + static_cast<std::int64_t>(std::llround(
                             static_cast<double>(plan.until_batches - start_batches) / per_step));
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
            static_cast<double>(applied - interval.applied) * rows_per_gradient / seconds;
        if (step > interval.step)
          r.seconds_per_step = seconds / static_cast<double>(step - interval.step);
      }
      interval = Interval{now, step, applied};
      return r;
    }
  };

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
    if (options.evaluate_each_epoch && !options.validation) {
      throw Error(
          "convoy: FitOptions::evaluate_each_epoch needs a validation set in "
          "FitOptions::validation");
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
