// Trainer: the training loop around a Strategy: data order, progress lines (or those TensorFlow's
// examples print), a history of the run, periodic and per-epoch evaluation, callbacks and hooks,
// and checkpoints that let a killed run resume exactly where it stopped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../io/checkpoint.hpp"
#include "../io/dataset.hpp"
#include "../io/weights.hpp"
#include "../optim/optimizer.hpp"
#include "fit_options.hpp"
#include "fit_run.hpp"
#include "step.hpp"

namespace convoy {

/// Owns a Strategy and trains it. It knows the strategy only through its public calls, and reads
/// and writes its state by name (snapshot, restore, save_checkpoint). Not thread-safe; fit() blocks
/// until training ends and rethrows the first error a replica raised.
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
    detail::FitRun<Trainer> run(*this, train, options);
    run.check_outputs();
    run.resume();
    run.make_plan();
    if (strategy_.serves()) return run.serve();
    run.begin();
    run.train();
    return run.finish();
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
    return strategy_.save_checkpoint(dir, data_seed);
  }

  /// Restores weights, optimizer slots, counters and generator states from `file`; returns the
  /// data seed the checkpointed run used. Throws CheckpointError or LoadError naming the file and
  /// what does not match; nothing changes then.
  std::uint64_t restore(std::filesystem::path const& file) {
    return restore(io::LoadedCheckpoint{file, io::load_checkpoint(file)});
  }
  /// The same, for a checkpoint already read (io::load_latest_checkpoint).
  std::uint64_t restore(io::LoadedCheckpoint const& loaded) {
    check_fits(loaded);
    auto const& file = loaded.file;
    auto const& state = loaded.checkpoint.state;
    try {
      strategy_.restore(state);
    } catch (LoadError const& e) {
      throw LoadError("convoy: checkpoint '" + file.string() + "': " + e.what());
    } catch (Error const& e) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "': " + e.what());
    }
    return loaded.checkpoint.data_seed;
  }

  /// Throws CheckpointError when `loaded` holds another optimizer's state, and LoadError naming
  /// every unknown, missing and mis-shaped weight or slot when it does not fit the model. Reads
  /// only the model's layout: nothing of the run is touched, so a caller can try older files.
  void check_fits(io::LoadedCheckpoint const& loaded) const {
    auto const& file = loaded.file;
    auto const& state = loaded.checkpoint.state;
    if (state.optimizer != strategy_.optimizer().name()) {
      throw CheckpointError("convoy: checkpoint '" + file.string() + "' holds " + state.optimizer +
                            " state but this run uses " +
                            std::string(strategy_.optimizer().name()));
    }
    std::vector<std::string> suffixes;
    for (auto const slot : strategy_.optimizer().slot_names()) {
      suffixes.push_back(optim::slot_suffix(slot));
    }
    try {
      strategy_.layout().check_names(state.weights, "its weights");
      if (!suffixes.empty() || !state.slots.empty()) {
        strategy_.layout().check_names(state.slots, "its optimizer slots", suffixes);
      }
    } catch (LoadError const& e) {
      throw LoadError("convoy: checkpoint '" + file.string() + "': " + e.what());
    }
  }

 private:
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
