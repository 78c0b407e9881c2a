// metrics_log: writes every record of a run (progress intervals and evaluations) to a CSV file or
// a JSON-lines file, one row each, flushed per row so that a crashed run leaves a readable file.
// The columns are fixed: epoch,global_step,elapsed_s,loss,samples_per_s,lr,val_loss,val_accuracy.
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "../../core/error.hpp"
#include "../../io/files.hpp"
#include "../history.hpp"
#include "../hooks.hpp"

namespace convoy::callbacks {

enum class MetricsFormat { csv, json_lines };

/// The columns, in order: the CSV header and the JSON keys.
inline constexpr std::string_view metrics_columns =
    "epoch,global_step,elapsed_s,loss,samples_per_s,lr,val_loss,val_accuracy";

/// *.csv: CSV; *.jsonl, *.ndjson or *.json: JSON lines. Throws Error naming the path otherwise.
inline MetricsFormat metrics_format_for(std::filesystem::path const& path) {
  auto const ext = path.extension();
  if (ext == ".csv") return MetricsFormat::csv;
  if (ext == ".jsonl" || ext == ".ndjson" || ext == ".json") return MetricsFormat::json_lines;
  throw Error("convoy: cannot tell the metrics format of '" + path.string() +
              "'; name it *.csv (CSV) or *.jsonl (JSON lines), or pass a "
              "convoy::callbacks::MetricsFormat");
}

namespace detail {
// A number as both formats write it: shortest text that reads back the same double.
inline std::string number(double value) {
  if (!std::isfinite(value)) return {};  // neither format has NaN or infinity: left absent
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}
inline std::string number(std::optional<double> value) {
  return value ? number(*value) : std::string();
}
}  // namespace detail

/// One record as a CSV row (no line end); an absent value is an empty field.
inline std::string csv_row(HistoryRecord const& r) {
  using detail::number;
  return std::to_string(r.epoch) + ',' + std::to_string(r.global_step) + ',' + number(r.elapsed_s) +
         ',' + number(r.loss) + ',' + number(r.samples_per_s) + ',' +
         number(static_cast<double>(r.lr)) + ',' + number(r.val_loss()) + ',' +
         number(r.val_accuracy());
}

/// One record as a JSON object on one line (no line end); an absent value is null.
inline std::string json_line(HistoryRecord const& r) {
  auto value = [](std::optional<double> v) {
    std::string const text = v ? detail::number(*v) : std::string();
    return text.empty() ? std::string("null") : text;
  };
  return "{\"epoch\": " + std::to_string(r.epoch) +
         ", \"global_step\": " + std::to_string(r.global_step) +
         ", \"elapsed_s\": " + value(r.elapsed_s) + ", \"loss\": " + value(r.loss) +
         ", \"samples_per_s\": " + value(r.samples_per_s) +
         ", \"lr\": " + value(static_cast<double>(r.lr)) +
         ", \"val_loss\": " + value(r.val_loss()) +
         ", \"val_accuracy\": " + value(r.val_accuracy()) + "}";
}

/// Hooks that write every interval and evaluation record of a fit() to `path` (replaced at the
/// start of the run; in a cluster, written by the chief only). The path is checked before the
/// first step: its directory must exist and be writable, and its extension name a format unless
/// `format` is given; fit then throws Error naming the path. Blocks on file I/O per row.
inline Hooks metrics_log(std::filesystem::path path, std::optional<MetricsFormat> format = {}) {
  struct State {
    std::filesystem::path path;
    MetricsFormat format;
    std::ofstream out;
  };
  auto const chosen = format ? *format : metrics_format_for(path);
  auto state = std::make_shared<State>(State{std::move(path), chosen, {}});
  auto write = [state](HistoryRecord const& record, RunControl&) {
    if (!state->out.is_open()) return true;
    state->out << (state->format == MetricsFormat::csv ? csv_row(record) : json_line(record))
               << '\n';
    state->out.flush();  // a crash leaves every row written so far
    if (!state->out) {
      throw Error("convoy: cannot write the metrics log '" + state->path.string() + "'");
    }
    return true;
  };
  Hooks hooks;
  hooks.on_check = [state](RunControl& control) {
    if (control.chief) io::require_writable_file(state->path, "metrics log");
  };
  hooks.on_begin = [state](RunControl& control) {
    if (!control.chief) return;
    state->out.open(state->path, std::ios::out | std::ios::trunc);
    if (!state->out) {
      throw Error("convoy: cannot open the metrics log '" + state->path.string() + "' to write");
    }
    if (state->format == MetricsFormat::csv) state->out << metrics_columns << '\n' << std::flush;
  };
  hooks.on_interval = write;
  hooks.on_evaluate = write;
  hooks.on_end = [state](RunControl&) { state->out.close(); };
  return hooks;
}

}  // namespace convoy::callbacks
