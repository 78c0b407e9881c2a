// Learning-rate schedules (step decay, cosine decay, linear warm-up in front of any schedule) and
// the hooks that apply one: before the first step and after every update, the optimizer's rate
// becomes schedule(global step), the rate of the update that comes next.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <string>
#include <utility>

#include "../../core/error.hpp"
#include "../hooks.hpp"

namespace convoy::callbacks {

/// The learning rate of the update that follows `step` global steps (the first update: step 0).
using Schedule = std::function<float(std::int64_t step)>;

/// `initial` multiplied by `factor` once every `every` steps: step 0..every-1 at `initial`.
/// Throws Error for every < 1 or a factor <= 0.
inline Schedule step_decay(float initial, float factor, std::int64_t every) {
  if (every < 1 || !(factor > 0.0f)) {
    throw Error("convoy: step_decay needs every >= 1 and factor > 0 (got every " +
                std::to_string(every) + ", factor " + std::to_string(factor) + ")");
  }
  return [=](std::int64_t step) {
    return initial * std::pow(factor, static_cast<float>(std::max<std::int64_t>(step, 0) / every));
  };
}

/// Cosine decay from `initial` at step 0 to `final_rate` at step `steps`, and `final_rate` after.
/// Throws Error for steps < 1.
inline Schedule cosine(float initial, std::int64_t steps, float final_rate = 0.0f) {
  if (steps < 1) {
    throw Error("convoy: cosine needs steps >= 1 (got " + std::to_string(steps) + ")");
  }
  return [=](std::int64_t step) {
    double const t = std::clamp(static_cast<double>(step) / static_cast<double>(steps), 0.0, 1.0);
    double const c = 0.5 * (1.0 + std::cos(std::numbers::pi * t));
    return static_cast<float>(final_rate + (initial - final_rate) * c);
  };
}

/// Rises linearly over the first `steps` steps to `then(0)`, then follows `then` shifted by
/// `steps` (so a warm-up of 100 then cosine(0.1, 900) decays over steps 100..1000). The first
/// update uses then(0) / steps. Throws Error for steps < 0 or an empty `then`.
inline Schedule warm_up(std::int64_t steps, Schedule then) {
  if (steps < 0 || !then) {
    throw Error("convoy: warm_up needs steps >= 0 and a schedule to follow");
  }
  return [steps, then = std::move(then)](std::int64_t step) {
    if (step >= steps) return then(step - steps);
    return then(0) * static_cast<float>(step + 1) / static_cast<float>(steps);
  };
}

/// Hooks that set the learning rate from `schedule` before the first step and after every
/// update, by global step. fit throws Error before the first step where the strategy cannot
/// change its rate (comm::ZmqPs) or the schedule gives a rate < 0 or not finite.
inline Hooks learning_rate_schedule(Schedule schedule) {
  if (!schedule) throw Error("convoy: learning_rate_schedule needs a schedule");
  Hooks hooks;
  hooks.on_begin = [schedule](RunControl& control) {
    control.set_learning_rate(schedule(control.global_step()));
  };
  hooks.on_step = [schedule](StepReport const& report, RunControl& control) {
    control.set_learning_rate(schedule(report.global_step));
    return true;
  };
  return hooks;
}

}  // namespace convoy::callbacks
