// keep_best: saves the weights by name, atomically, each time a validation metric improves, so
// that the file always holds the best weights seen in the run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>

#include "../../io/files.hpp"
#include "../hooks.hpp"
#include "monitor.hpp"

namespace convoy::callbacks {

/// Hooks that save the weights to `path` (format from its extension: *.bin, *.pbin, *.json) at
/// every evaluation whose monitored metric improves on the best of this fit() call; in a cluster,
/// the chief saves. The path is checked before the first step (fit throws Error naming it when
/// its directory does not exist or cannot be written, or its extension names no format). Each
/// save replaces the file atomically and blocks while writing; `best()` gives the value saved.
class KeepBest {
 public:
  KeepBest(std::filesystem::path path, Monitor monitor = {})
      : state_(std::make_shared<State>(State{std::move(path), monitor, {}, 0})) {}

  /// The monitored value of the weights last saved, if any.
  std::optional<double> best() const { return state_->best; }
  /// The global step of the weights last saved (0: none).
  std::int64_t best_step() const { return state_->best_step; }

  Hooks hooks() const {
    auto state = state_;
    Hooks hooks;
    hooks.on_check = [state](RunControl& control) {
      if (control.chief) io::require_writable_file(state->path, "best-weights file", true);
    };
    hooks.on_begin = [state](RunControl&) {
      state->best.reset();
      state->best_step = 0;
    };
    hooks.on_evaluate = [state](HistoryRecord const& record, RunControl& control) {
      auto const value = state->monitor.value(record);
      if (!value || !state->monitor.improves(*value, state->best)) return true;
      state->best = *value;
      state->best_step = record.global_step;
      if (control.chief) control.save_weights(state->path);
      return true;
    };
    return hooks;
  }
  operator Hooks() const { return hooks(); }

 private:
  struct State {
    std::filesystem::path path;
    Monitor monitor;
    std::optional<double> best;
    std::int64_t best_step = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace convoy::callbacks
