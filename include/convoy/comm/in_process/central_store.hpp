// The central store: the in-process engine for everything that is not lock step (asynchronous
// updates, bounded staleness, and synchronous steps that aggregate the first M of R gradients).
// The central weights are the truth, cut into chunks that each have their own lock: a replica
// pulls a copy chunk by chunk, computes on it without any lock, and applies (or adds) its gradients
// chunk by chunk, so two replicas update different chunks at the same time and the serial part of
// an update is a counter increment. The Sync policy's rule object decides who may start and what
// an arriving gradient does; the store only moves floats.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/detail/aligned_allocator.hpp"
#include "../../core/error.hpp"
#include "../../sync/rules.hpp"
#include "../../train/step.hpp"
#include "replica_threads.hpp"

namespace convoy::comm::in_process {

/// An arena cut into chunks under locks of their own. Locks striped by chunk rather than relaxed
/// atomic writes (Hogwild): every chunk of a pulled copy is one consistent state, each update of a
/// chunk is whole, and Adam's slots stay coherent with the weights they belong to.
class StripedArena {
 public:
  /// Chunks of at least 4096 floats (16 KiB: a lock per chunk costs nothing beside the copy), at
  /// most 64 of them.
  StripedArena(std::span<float> arena, std::size_t replicas)
      : arena_(arena),
        chunks_(std::clamp<std::size_t>(arena.size() / 4096, 1, 64)),
        locks_(std::make_unique<std::mutex[]>(chunks_)),
        replicas_(std::max<std::size_t>(replicas, 1)) {}

  /// Calls f(begin, end) for every chunk under its lock, starting at a chunk that depends on
  /// `replica`, so replicas that update at the same time start apart instead of queueing.
  template <class F>
  void for_each_chunk(std::size_t replica, F&& f) const {
    std::size_t const first = replica * chunks_ / replicas_;
    for (std::size_t i = 0; i < chunks_; ++i) {
      std::size_t const k = (first + i) % chunks_;
      auto const [begin, end] = chunk_bounds(arena_.size(), chunks_, k);
      if (begin == end) continue;
      std::lock_guard lock(locks_[k]);
      f(begin, end);
    }
  }
  std::span<float> arena() const { return arena_; }

 private:
  std::span<float> arena_;
  std::size_t chunks_;
  std::unique_ptr<std::mutex[]> locks_;
  std::size_t replicas_;
};

/// Rules that bound staleness (sync::ClockTable) promise that a replica at clock c computes on
/// weights holding every update up to clock c - S - 1, so such a replica pulls after its wait at
/// the start of every step, and never reuses the copy its own update left it.
template <class Rules>
concept bounds_staleness = requires(Rules const& rules) { rules.lead(std::size_t{0}); };

/// Runs `plan` on the central store under `sync`'s rules: one thread per replica. Blocks until the
/// run ends. Returns the replicas abandoned for outlasting the policy's timeout; else rethrows the
/// first error, or, when the policy carries on after errors, throws ReplicaError naming every
/// replica that failed (each was logged on std::clog when it failed) once the others are done.
template <class Group, class Sync>
std::vector<std::size_t> run_central_store(std::shared_ptr<Group> const& group_ptr,
                                           std::shared_ptr<RunPlan const> const& plan_ptr,
                                           Sync const& policy) {
  using clock = std::chrono::steady_clock;
  Group& g = *group_ptr;
  RunPlan const& plan = *plan_ptr;
  std::size_t const replicas = g.size();
  std::size_t const n = g.layout().element_count();
  auto& counters = g.counters();
  auto rules = policy.make_rules(counters);
  bool const accumulates = rules.accumulates();
  bool const carry_on = policy.continue_after_error();

  StripedArena const weights(g.central(), replicas);
  convoy::detail::AlignedVector<float> sum_storage(accumulates ? n : 0, 0.0f);
  StripedArena const sum(sum_storage, replicas);

  // The run's locks live on the heap: ThreadSanitizer forgets a mutex only when its memory is
  // freed, so mutexes of successive runs at one stack address would share one lock-order history.
  struct Locks {
    std::mutex state;   // guards rules, counters and the fields below
    std::mutex report;  // after_step: one call at a time, outside the other locks
    std::condition_variable changed;
    FirstError error;
  };
  auto const locks = std::make_unique<Locks>();
  auto& mutex = locks->state;
  auto& report_mutex = locks->report;
  auto& changed = locks->changed;
  auto& error = locks->error;
  bool stop = false;
  std::int64_t claimed = counters.batches();  // batches handed out, computed or not
  std::int64_t promised = counters.global_step;  // not accumulating: updates handed out
  std::size_t computing = 0;                  // replicas between claim and delivery
  float loss_sum = 0.0f;
  std::vector<std::size_t> failed;
  auto watch = std::make_shared<Watch>(replicas, policy.timeout);

  // With the mutex held.
  auto finished = [&] {
    // Each batch handed out becomes one update unless the rules accumulate (and may drop).
    return stop || plan.reached(accumulates ? counters.global_step : promised, claimed);
  };
  auto fail_all = [&](std::exception_ptr what) {
    error.capture(std::move(what));
    stop = true;
    changed.notify_all();
  };
  auto report = [&](StepReport const& r) {
    std::lock_guard lock(report_mutex);
    bool keep_going = true;
    try {
      keep_going = !plan.after_step || plan.after_step(r);
    } catch (...) {
      std::lock_guard state(mutex);
      fail_all(std::current_exception());
      return;
    }
    if (!keep_going) {
      std::lock_guard state(mutex);
      stop = true;
      changed.notify_all();
    }
  };
  // Applies `grads` (scaled) to the central weights as update number `update`, chunk by chunk;
  // zeroes each chunk of the sum once applied when the gradients are the sum.
  // Without a sum, the updated chunk is also copied into the replica's own weights while it is
  // still in the cache (a push and the next pull in one pass, as ps-lite's PushPull), so its next
  // step needs no separate pull: it computes on the central weights as of its own update.
  auto apply = [&](auto const& ctx, std::size_t r, std::span<float const> grads, float scale,
                   std::int64_t update, bool from_sum, std::span<float> pull_into) {
    weights.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
      g.optimizer().apply(ctx, weights.arena(), grads.subspan(b, e - b), g.slots(), b, scale,
                          update);
      if (from_sum) std::fill(sum_storage.begin() + b, sum_storage.begin() + e, 0.0f);
      if (!pull_into.empty()) {
        std::copy(weights.arena().begin() + b, weights.arena().begin() + e, pull_into.begin() + b);
      }
    });
  };

  auto replica_loop = [&](std::size_t r) {
    ThreadHold const hold(group_ptr, plan_ptr, watch, r);
    auto const& model = hold.model;
    auto const ctx = g.context(r);
    auto const scope = ctx.enter();
    auto& vars = model->variables();
    bool pulled = false;  // the replica's weights already hold its own last update
    auto retire = [&] {
      std::lock_guard lock(mutex);
      rules.retire(r);
      changed.notify_all();
    };
    for (;;) {
      std::int64_t tag = 0, lead = 0, local = 0;
      {
        std::unique_lock lock(mutex);
        if (finished()) break;
        if (!rules.may_start(r)) {
          bool const ok = changed.wait_for(lock, policy.timeout,
                                           [&] { return finished() || rules.may_start(r); });
          if (!ok) {
            fail_all(std::make_exception_ptr(TimeoutError(
                "convoy: replica " + std::to_string(r) + " waited " +
                std::to_string(policy.timeout.count()) + " ms under " + std::string(Sync::name) +
                " for " + rules.waiting_for(r))));
          }
          if (finished()) break;
        }
        if constexpr (requires { rules.lead(r); }) lead = rules.lead(r);
        ++claimed;
        ++promised;
        ++computing;
        tag = rules.open_step();
        local = counters.local_steps[r];
      }
      if (!pulled) {
        weights.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
          std::copy(weights.arena().begin() + b, weights.arena().begin() + e,
                    vars.weights().begin() + b);
        });
      }
      pulled = false;

      float loss = 0.0f;
      double seconds = 0.0;
      hold.watch->begin(r);
      try {
        Batch const batch = hold.plan->batch(r, local);
        auto const start = clock::now();
        loss = forward_backward_in(*model, batch, ctx);
        seconds = std::chrono::duration<double>(clock::now() - start).count();
      } catch (...) {
        if (!hold.watch->end(r)) return;
        std::unique_lock lock(mutex);
        --claimed;  // the batch goes back: another replica trains on it
        --promised;
        --computing;
        if (!carry_on) {
          fail_all(std::current_exception());
          break;
        }
        std::string what = "unknown error";
        try {
          throw;
        } catch (std::exception const& e) {
          what = e.what();
        } catch (...) {
        }
        std::clog << "convoy: replica " << r << " failed and stops; the others carry on: " << what
                  << std::endl;
        error.capture();
        failed.push_back(r);
        lock.unlock();
        break;
      }
      if (!hold.watch->end(r)) return;  // abandoned: the run and its state are gone

      sync::Admission admission;
      std::int64_t update = 0;
      {
        std::shared_lock gate(g.gate());  // counters change: not while a snapshot reads them
        std::lock_guard lock(mutex);
        --computing;
        if (stop) break;
        admission = rules.admit(r, tag);
        if (admission == sync::Admission::drop) {
          // Late: the gradient is dropped, but not its rows. The batch goes back and the replica
          // computes it again on fresher weights, so a run of N epochs learns from N passes over
          // the data whatever M is, and no straggler's slice of it is lost.
          ++counters.dropped;
          --claimed;
          changed.notify_all();
          continue;
        }
        ++counters.local_steps[r];
      }
      // Library code, not timed: it always finishes, and an abandoned thread must not be in it.
      bool complete = admission == sync::Admission::apply;
      StepReport done;
      try {
        if (admission == sync::Admission::accumulate) {
          {
            std::shared_lock gate(g.gate());
            auto const grads = vars.grads();
            sum.for_each_chunk(r, [&](std::size_t b, std::size_t e) {
              for (std::size_t i = b; i < e; ++i) sum_storage[i] += grads[i];
            });
          }
          std::lock_guard lock(mutex);
          loss_sum += loss;
          complete = rules.accumulated(r);  // the M-th to finish adding applies the sum
          if (complete) {
            loss = loss_sum / static_cast<float>(rules.gradients_per_update());
            loss_sum = 0.0f;
          }
        }
        if (complete) {
          bool const from_sum = admission == sync::Admission::accumulate;
          auto const m = from_sum ? rules.gradients_per_update() : std::size_t{1};
          // The update's number, its floats and its counts change under one hold of the gate, so a
          // snapshot never sees the optimizer a step ahead of global_step.
          std::shared_lock gate(g.gate());
          {
            std::lock_guard lock(mutex);
            update = ++g.slots().updates;
          }
          apply(ctx, r, from_sum ? std::span<float const>(sum_storage) : vars.grads(),
                1.0f / static_cast<float>(m), update, from_sum,
                from_sum ? std::span<float>() : vars.weights());
          pulled = !from_sum && !bounds_staleness<decltype(rules)>;
          std::lock_guard lock(mutex);
          ++counters.global_step;
          counters.applied += static_cast<std::int64_t>(m);
          rules.applied(r);
          done = {.global_step = counters.global_step,
                  .local_step = counters.local_steps[r],
                  .replica = r,
                  .loss = loss,
                  .seconds = seconds,
                  .applied = counters.applied,
                  .dropped = counters.dropped,
                  .batches = counters.batches(),
                  .lead = lead};
          changed.notify_all();
        }
      } catch (...) {
        std::lock_guard lock(mutex);
        fail_all(std::current_exception());
        break;
      }
      if (complete) {
        report(done);
        continue;
      }
      // Wait for the step to be applied, so that the next pull sees it. At the end of a run, when
      // no replica is computing any more, the step can never complete: its gradients are dropped.
      std::unique_lock lock(mutex);
      bool const ok = changed.wait_for(lock, policy.timeout, [&] {
        return stop || rules.open_step() != tag || (finished() && computing == 0);
      });
      if (!ok) {
        fail_all(std::make_exception_ptr(TimeoutError(
            "convoy: synchronous step waited " + std::to_string(policy.timeout.count()) +
            " ms: " + rules.waiting_for(r))));
        break;
      }
      if (rules.open_step() == tag && !stop) {  // abandoned at the end of the run
        if constexpr (requires { rules.discard(); }) {
          counters.dropped += static_cast<std::int64_t>(rules.discard());
        }
        changed.notify_all();
        break;
      }
    }
    retire();
  };

  g.set_at_rest(false);
  auto const stuck = run_replica_threads(replicas, watch, replica_loop, [&] {
    std::lock_guard lock(mutex);
    stop = true;
    changed.notify_all();
  });
  g.set_at_rest(true);
  if (!stuck.empty()) return stuck;
  g.publish_central();
  if (!failed.empty() && carry_on) {
    std::sort(failed.begin(), failed.end());
    std::string what;
    try {
      error.rethrow();
    } catch (std::exception const& e) {
      what = e.what();
    } catch (...) {
    }
    throw ReplicaError("convoy: " + name_replicas(failed) + " of " + std::to_string(replicas) +
                           " failed during the asynchronous run; the others trained on to global "
                           "step " +
                           std::to_string(counters.global_step) + ". First error: " + what,
                       failed);
  }
  error.rethrow();
  return {};
}

}  // namespace convoy::comm::in_process
