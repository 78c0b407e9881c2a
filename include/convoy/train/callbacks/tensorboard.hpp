// tensorboard: hooks that write a run to TensorBoard event files: the training loss of each
// progress interval, the learning rate, samples per second and the validation metrics as scalars,
// and every so many steps a histogram of every variable and of its gradient, by variable name.
// Needs the convoy::tensorboard target (protobuf); convoy.hpp leaves it out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "../../core/error.hpp"
#include "../../io/weights.hpp"
#include "../../tensorboard/event_writer.hpp"
#include "../history.hpp"
#include "../hooks.hpp"

namespace convoy::callbacks {

struct TensorBoardOptions {
  /// Global steps between histograms of every variable (tag: its name, "mlp/layer1/kernel") and
  /// of its gradient ("mlp/layer1/kernel/gradient"); 0: no histograms.
  std::int64_t histograms_every = 0;
  /// Whether histograms include the gradients (only lock-step runs can give them; see
  /// Strategy::get_gradients).
  bool gradients = true;
};

/// The scalar tags the hooks write: an interval's mean training loss, the learning rate and
/// samples per second at its last step; an evaluation's validation loss and accuracy.
namespace tensorboard_tags {
inline constexpr char const* loss = "loss";
inline constexpr char const* learning_rate = "learning_rate";
inline constexpr char const* samples_per_second = "samples_per_second";
inline constexpr char const* val_loss = "validation/loss";
inline constexpr char const* val_accuracy = "validation/accuracy";
inline constexpr char const* gradient_suffix = "/gradient";
}  // namespace tensorboard_tags

/// Hooks that write each fit() call to a new event file in `log_dir` (created when missing;
/// `tensorboard --logdir` on it, or on its parent for several runs), at the global step of each
/// record: scalars per progress interval and evaluation, and histograms of the weights and of the
/// gradients of the last update every `histograms_every` steps. In a cluster the chief writes.
/// Gradient histograms need a lock-step run (Synchronous aggregating every replica, or one
/// replica); elsewhere only the weights' are written and fit's log says so once. The directory
/// is checked before the first step (fit throws Error naming it). Blocks on file I/O in the hooks;
/// the file is flushed after every record. Throws Error for histograms_every < 0.
inline Hooks tensorboard(std::filesystem::path log_dir, TensorBoardOptions options = {}) {
  if (options.histograms_every < 0) {
    throw Error("convoy: tensorboard needs histograms_every >= 0 (0: no histograms; got " +
                std::to_string(options.histograms_every) + ")");
  }
  struct State {
    std::filesystem::path dir;
    TensorBoardOptions options;
    std::optional<tensorboard::EventWriter> writer;
    std::int64_t last_histograms = 0;  // global step of the last histograms written
    bool told_no_gradients = false;
  };
  auto state = std::make_shared<State>(State{std::move(log_dir), options, {}, 0, false});
  Hooks hooks;
  hooks.on_check = [state](RunControl& control) {
    if (control.chief) io::require_writable_directory(state->dir, "TensorBoard log directory");
  };
  hooks.on_begin = [state](RunControl& control) {
    if (!control.chief) return;
    state->writer.emplace(state->dir);
    state->last_histograms = control.global_step();
    state->told_no_gradients = false;
  };
  hooks.on_interval = [state](HistoryRecord const& record, RunControl&) {
    if (!state->writer) return true;
    namespace tags = tensorboard_tags;
    auto& w = *state->writer;
    if (record.loss) w.add_scalar(tags::loss, *record.loss, record.global_step);
    w.add_scalar(tags::learning_rate, record.lr, record.global_step);
    if (record.samples_per_s) {
      w.add_scalar(tags::samples_per_second, *record.samples_per_s, record.global_step);
    }
    w.flush();
    return true;
  };
  hooks.on_evaluate = [state](HistoryRecord const& record, RunControl&) {
    if (!state->writer || !record.validation) return true;
    namespace tags = tensorboard_tags;
    state->writer->add_scalar(tags::val_loss, *record.val_loss(), record.global_step);
    state->writer->add_scalar(tags::val_accuracy, *record.val_accuracy(), record.global_step);
    state->writer->flush();
    return true;
  };
  hooks.on_step = [state](StepReport const& report, RunControl& control) {
    auto const every = state->options.histograms_every;
    // At the first update past each multiple of `every`: a cluster's worker hears only of its own.
    if (!state->writer || every == 0 || report.global_step / every <= state->last_histograms / every) {
      return true;
    }
    state->last_histograms = report.global_step;
    auto& w = *state->writer;
    for (auto const& [name, tensor] : control.weights()) {
      w.add_histogram(name, tensor.data, report.global_step);
    }
    if (state->options.gradients) {
      auto const gradients = control.gradients();
      for (auto const& [name, tensor] : gradients) {
        w.add_histogram(name + tensorboard_tags::gradient_suffix, tensor.data, report.global_step);
      }
      if (gradients.empty() && !state->told_no_gradients && control.log) {
        *control.log << "convoy: tensorboard writes no gradient histograms: this strategy does not "
                        "run in lock step, so its replicas' gradients belong to different updates; "
                        "train with sync::Synchronous aggregating every replica to get them, or "
                        "pass TensorBoardOptions{.gradients = false} to silence this"
                     << std::endl;
      }
      state->told_no_gradients = state->told_no_gradients || gradients.empty();
    }
    w.flush();
    return true;
  };
  hooks.on_end = [state](RunControl&) { state->writer.reset(); };
  return hooks;
}

}  // namespace convoy::callbacks
