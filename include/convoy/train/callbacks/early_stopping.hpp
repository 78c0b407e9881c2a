// early_stopping: stops a run once a validation metric has not improved for `patience`
// evaluations in a row, and says why on fit's log.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "../../core/error.hpp"
#include "../hooks.hpp"
#include "monitor.hpp"

namespace convoy::callbacks {

struct EarlyStopping {
  Monitor monitor{};
  int patience = 3;  ///< evaluations without improvement to accept; the next one stops (>= 0)
};

/// Hooks that stop fit() after `options.patience` evaluations in a row that do not improve on the
/// best value of the monitored metric, printing the reason on fit's log. The evaluations are
/// those fit makes (evaluate_every, evaluate_each_epoch); the best counts from this fit() call.
/// Throws Error for patience < 0 or min_delta < 0.
inline Hooks early_stopping(EarlyStopping options) {
  if (options.patience < 0 || !(options.monitor.min_delta >= 0.0)) {
    throw Error("convoy: early_stopping needs patience >= 0 and min_delta >= 0 (got patience " +
                std::to_string(options.patience) + ", min_delta " +
                std::to_string(options.monitor.min_delta) + ")");
  }
  struct State {
    std::optional<double> best;
    std::int64_t best_step = 0;
    int waited = 0;
  };
  auto state = std::make_shared<State>();
  Hooks hooks;
  hooks.on_begin = [state](RunControl&) { *state = State{}; };
  hooks.on_evaluate = [state, options](HistoryRecord const& record, RunControl& control) {
    auto const value = options.monitor.value(record);
    if (!value) return true;
    if (options.monitor.improves(*value, state->best)) {
      state->best = *value;
      state->best_step = record.global_step;
      state->waited = 0;
      return true;
    }
    if (++state->waited <= options.patience) return true;
    if (control.log) {
      std::ostringstream line;
      line << "convoy: early stopping at global step " << record.global_step << ": "
           << metric_name(options.monitor.metric) << " has not "
           << (options.monitor.direction() == Mode::min ? "fallen below " : "risen above ")
           << *state->best << " (global step " << state->best_step << ")";
      if (options.monitor.min_delta > 0) line << " by more than " << options.monitor.min_delta;
      line << " in " << state->waited << " evaluations";
      *control.log << line.str() << std::endl;
    }
    return false;
  };
  return hooks;
}

}  // namespace convoy::callbacks
