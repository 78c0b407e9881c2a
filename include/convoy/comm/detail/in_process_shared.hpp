// The in-process engine for everything that is not lock-step: asynchronous updates, bounded
// staleness, and synchronous steps that aggregate only the first M of R gradients. The central
// weights are the truth; each replica pulls a copy under a lock, computes on it without holding the
// lock, and pushes its gradients back under the lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../core/error.hpp"
#include "../../math/host.hpp"
#include "../../train/step.hpp"
#include "replica_state.hpp"

namespace convoy::comm::detail {

struct SharedMode {
  enum class Kind { asynchronous, bounded, aggregate } kind = Kind::asynchronous;
  int staleness = 0;             ///< bounded: most clocks a replica may lead the slowest
  std::size_t to_aggregate = 0;  ///< aggregate: gradients per update (M)
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// Runs `plan` with one thread per replica (the calling thread is replica 0) under `mode`. Blocks
/// until the run ends; rethrows the first exception a replica raised, or a TimeoutError naming the
/// replicas a wait was for, once every thread has stopped (a replica stuck inside user code is
/// waited for: a thread cannot be interrupted). after_step runs under the lock while other replicas
/// compute on their own copies of the weights.
template <class M>
void run_shared(ReplicaState<M>& s, RunPlan const& plan, SharedMode mode) {
  using Kind = SharedMode::Kind;
  using clock = std::chrono::steady_clock;
  std::size_t const replicas = s.replicas.size();
  std::size_t const n = s.central.size();
  std::int64_t const done_clock = std::numeric_limits<std::int64_t>::max();

  std::mutex mutex;
  std::condition_variable changed;
  bool stop = false;
  FirstError error;
  std::int64_t claimed = s.global_step;              // async/bounded: gradients promised so far
  std::vector<std::int64_t> clocks = s.local_steps;  // bounded: completed steps per replica
  std::vector<float> sum(mode.kind == Kind::aggregate ? n : 0);
  std::vector<char> delivered(replicas, 0);  // aggregate: who has contributed to the open step
  std::size_t contributions = 0;
  float loss_sum = 0.0f;

  auto finished = [&] {
    return stop || (mode.kind == Kind::aggregate ? s.step >= plan.until : claimed >= plan.until);
  };
  auto report = [&](StepReport const& r) {
    try {
      if (plan.after_step && !plan.after_step(r)) stop = true;
    } catch (...) {
      error.capture();
      stop = true;
    }
  };
  // Called with the mutex held.
  auto fail = [&](std::exception_ptr what) {
    error.capture(std::move(what));
    stop = true;
    changed.notify_all();
  };

  auto replica_loop = [&](std::size_t r) {
    auto& vars = s.replicas[r].variables();
    for (;;) {
      std::int64_t tag = 0, lead = 0;
      {
        std::unique_lock lock(mutex);
        if (finished()) break;
        if (mode.kind == Kind::bounded) {
          auto lead_now = [&] {
            return clocks[r] - *std::min_element(clocks.begin(), clocks.end());
          };
          bool const ok = changed.wait_for(lock, mode.timeout,
                                           [&] { return stop || lead_now() <= mode.staleness; });
          if (stop) break;
          if (!ok) {
            auto slowest = std::min_element(clocks.begin(), clocks.end()) - clocks.begin();
            fail(std::make_exception_ptr(TimeoutError(
                "convoy: replica " + std::to_string(r) + " waited " +
                std::to_string(mode.timeout.count()) + " ms for replica " +
                std::to_string(slowest) + " (clock " + std::to_string(clocks[slowest]) +
                ") under BoundedStaleness<" + std::to_string(mode.staleness) + ">")));
            break;
          }
          if (finished()) break;  // others may have used up the steps while this one waited
          lead = lead_now();
        }
        if (mode.kind != Kind::aggregate) ++claimed;
        tag = s.step;
        std::copy(s.central.begin(), s.central.end(), vars.weights().begin());
      }

      float loss = 0.0f;
      double seconds = 0.0;
      try {
        Batch const batch = plan.batch(r, s.local_steps[r]);
        auto const start = clock::now();
        loss = static_cast<float>(s.replicas[r].forward_backward(batch));
        seconds = std::chrono::duration<double>(clock::now() - start).count();
      } catch (...) {
        std::lock_guard lock(mutex);
        fail(std::current_exception());
        break;
      }

      std::unique_lock lock(mutex);
      if (stop) break;
      ++s.local_steps[r];
      if (mode.kind != Kind::aggregate) {
        s.optimizer.apply(s.central, vars.grads(), s.slots, 0, 1.0f, s.slots.updates + 1);
        ++s.slots.updates;
        ++s.step;
        ++s.global_step;
        ++clocks[r];
        report({.step = s.step,
                .global_step = s.global_step,
                .local_step = s.local_steps[r],
                .replica = r,
                .loss = loss,
                .seconds = seconds,
                .dropped = s.dropped,
                .lead = lead});
        changed.notify_all();
        continue;
      }
      if (tag != s.step) {  // the step this gradient was computed for has been applied without it
        ++s.dropped;
        continue;
      }
      auto grads = vars.grads();
      if (contributions == 0) {
        std::copy(grads.begin(), grads.end(), sum.begin());
      } else {
        for (std::size_t i = 0; i < n; ++i) sum[i] += grads[i];
      }
      delivered[r] = 1;
      loss_sum += loss;
      if (++contributions == mode.to_aggregate) {
        float const scale = 1.0f / static_cast<float>(contributions);
        s.optimizer.apply(s.central, sum, s.slots, 0, scale, s.slots.updates + 1);
        ++s.slots.updates;
        ++s.step;
        s.global_step += static_cast<std::int64_t>(contributions);
        report({.step = s.step,
                .global_step = s.global_step,
                .local_step = s.local_steps[r],
                .replica = r,
                .loss = loss_sum * scale,
                .seconds = seconds,
                .dropped = s.dropped});
        contributions = 0;
        loss_sum = 0.0f;
        std::fill(delivered.begin(), delivered.end(), 0);
        changed.notify_all();
        continue;
      }
      if (!changed.wait_for(lock, mode.timeout, [&] { return stop || s.step != tag; })) {
        std::string missing;
        for (std::size_t u = 0; u < replicas; ++u) {
          if (!delivered[u]) missing += (missing.empty() ? "" : ", ") + std::to_string(u);
        }
        fail(std::make_exception_ptr(TimeoutError(
            "convoy: synchronous step " + std::to_string(tag + 1) + " waited " +
            std::to_string(mode.timeout.count()) + " ms for " + std::to_string(mode.to_aggregate) +
            " gradients and has " + std::to_string(contributions) + "; replicas " + missing +
            " have not delivered")));
        break;
      }
    }
    std::lock_guard lock(mutex);
    clocks[r] = done_clock;  // a replica that has stopped no longer holds the others back
    changed.notify_all();
  };

  run_on_replica_threads(replicas, replica_loop);
  error.rethrow();
}

}  // namespace convoy::comm::detail
