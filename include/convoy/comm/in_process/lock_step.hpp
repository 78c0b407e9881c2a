// The lock-step in-process loop (Synchronous aggregating every replica): replicas are threads that
// meet at a barrier after computing their gradients; thread t then sums chunk t of every replica's
// gradients, applies the optimizer to chunk t (reduce-scatter) and, when each replica keeps its own
// weights, writes the updated chunk into every replica (all-gather), block by block in one pass; a
// second barrier ends the step. Sums run in replica order, so runs are bit-identical.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#if defined(__SSE__)
// _mm_stream_ps, _mm_loadu_ps and _mm_sfence are SSE: <xmmintrin.h> has them in a few hundred
// lines, where <immintrin.h> parses every AVX-512 header (a fifth of the umbrella's compile).
#include <xmmintrin.h>
#endif
#include <span>
#include <thread>
#include <vector>

#include "../../core/concepts.hpp"
#include "../../core/gradient_places.hpp"
#include "../../optim/optimizer.hpp"
#include "../../train/step.hpp"
#include "replica_threads.hpp"
#include "step_barrier.hpp"
#include "step_count.hpp"
#include "wait_notice.hpp"

namespace convoy::comm::in_process {

/// Arenas from this size on are broadcast with non-temporal stores: they do not fit in the caches,
/// so reading each destination line before overwriting it (what an ordinary store does) only adds
/// memory traffic. Smaller arenas stay in the caches, where the other replicas read them next step.
// 2 threads, Xeon VM with 2 MiB L2 per core: exchange/copy 0.77 at 67 MB with ordinary stores
// (benchmarks/bench_allreduce, 2026-11-21).
inline constexpr std::size_t streaming_floats = std::size_t{8} << 20;

/// dst[0, count) = src[0, count); `streaming` bypasses the caches where the processor allows it.
inline void copy_block(float* dst, float const* src, std::size_t count, bool streaming) {
#if defined(__SSE__)
  if (streaming && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0 && count % 4 == 0) {
    for (std::size_t i = 0; i < count; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    return;
  }
#endif
  std::memcpy(dst, src, count * sizeof(float));
}

/// Floats summed per pass: small enough that the partial sum stays in L1 while every replica's
/// gradients stream through it once.
inline constexpr std::size_t reduce_block = 2048;

/// acc[0, count) = sum over r of sources[r][offset, offset + count), in replica order.
inline void sum_block(std::span<float const* const> sources, std::size_t offset, std::size_t count,
                      float* acc) {
  std::memcpy(acc, sources[0] + offset, count * sizeof(float));
  for (std::size_t r = 1; r < sources.size(); ++r) {
    float const* src = sources[r] + offset;
#pragma omp simd
    for (std::size_t i = 0; i < count; ++i) acc[i] += src[i];
  }
}

/// Sums chunk [begin, end) of the replicas' gradients block by block, applies the optimizer to the
/// same range of `weights[0]` with the gradients scaled by 1/replicas, and copies each updated
/// block into the other `weights` arenas while it is still in L1: reduce-scatter and all-gather in
/// one pass, with the update fused in, so the summed gradients are never written to memory and no
/// replica has to read back what another updated. `grads[r]` holds replica r's gradients from
/// arena element `from` on (0: its whole arena).
template <class Context>
void reduce_apply_broadcast(Context const& ctx, std::span<float const* const> grads,
                            std::size_t begin, std::size_t end, std::span<float* const> weights,
                            std::size_t arena_size, optim::Optimizer const& opt,
                            optim::OptimizerState& slots, std::int64_t update,
                            std::size_t from = 0) {
  alignas(64) std::array<float, reduce_block> acc;
  float const scale = 1.0f / static_cast<float>(grads.size());
  std::span<float> const updated(weights[0], arena_size);
  if (grads.size() == 1 && weights.size() == 1) {  // one replica: nothing to sum or broadcast
    opt.apply(ctx, updated, std::span<float const>(grads[0] + (begin - from), end - begin), slots,
              begin, 1.0f, update);
    return;
  }
  bool const streaming = arena_size >= streaming_floats;
  for (std::size_t at = begin; at < end; at += reduce_block) {
    std::size_t const count = std::min(reduce_block, end - at);
    sum_block(grads, at - from, count, acc.data());
    opt.apply(ctx, updated, std::span<float const>(acc.data(), count), slots, at, scale, update);
    for (std::size_t d = 1; d < weights.size(); ++d)
      copy_block(weights[d] + at, weights[0] + at, count, streaming);
  }
#if defined(__SSE__)
  if (streaming)
    _mm_sfence();  // non-temporal stores are weakly ordered: finish them before the barrier
#endif
}

/// The same over the gradients wherever each replica's model left them (`places`, by replica), a
/// variable at a time; `sources` is room for a pointer a replica. Where every gradient is in its
/// arena, the arenas (the first variable's place) serve the whole chunk at once.
template <class Context>
void reduce_apply_broadcast(Context const& ctx, std::span<GradientPlaces const> places,
                            std::span<float const*> sources, std::size_t begin, std::size_t end,
                            std::span<float* const> weights, std::size_t arena_size,
                            optim::Optimizer const& opt, optim::OptimizerState& slots,
                            std::int64_t update) {
  if (std::ranges::none_of(places, &GradientPlaces::left)) {
    for (std::size_t r = 0; r < places.size(); ++r) sources[r] = places[r].of(0);
    return reduce_apply_broadcast(ctx, std::span<float const* const>(sources), begin, end, weights,
                                  arena_size, opt, slots, update);
  }
  auto const list = places[0].list();
  for (std::size_t v = 0; v < list.size() && list[v].offset < end; ++v) {
    std::size_t const first = std::max(begin, list[v].offset);
    std::size_t const last = std::min(end, list[v].offset + list[v].size);
    if (first >= last) continue;
    for (std::size_t r = 0; r < places.size(); ++r)
      sources[r] = places[r].of(v) + (first - list[v].offset);
    reduce_apply_broadcast(ctx, std::span<float const* const>(sources), first, last, weights,
                           arena_size, opt, slots, update, first);
  }
}

/// Replicas on devices (place::CentralStorageGpus) compute there, and the sum over them runs on
/// the host (settle_on_host: it waits for a replica's kernels before reading its gradients), and
/// updates the central copy with the host's math. Host contexts pass through.
template <class Context>
Context host_side(Context const& ctx) {
  if constexpr (may_compute_on_device<Context>) {
    return ctx.on_device() ? Context::host() : ctx;
  } else {
    return ctx;
  }
}

/// Where thread `owner`'s chunk goes when every replica keeps its own weights: its own replica's
/// arena first (the optimizer updates that one in place), then every other replica's.
inline std::vector<float*> mirrored_destinations(std::span<float* const> weights,
                                                 std::size_t owner) {
  std::vector<float*> out{weights[owner]};
  for (std::size_t u = 0; u < weights.size(); ++u) {
    if (u != owner) out.push_back(weights[u]);
  }
  return out;
}

/// Where each thread's chunk of a lock-step update goes: the central copy, or every replica's
/// weights. (What it reads, each replica's gradients, is in the group's GradientPlaces.)
template <class Group>
std::vector<std::vector<float*>> lock_step_destinations(Group& g) {
  std::size_t const replicas = g.size();
  std::vector<std::vector<float*>> destinations(replicas);
  std::vector<float*> weights(replicas);
  for (std::size_t r = 0; r < replicas; ++r) weights[r] = g.variables(r).weights().data();
  for (std::size_t r = 0; r < replicas; ++r) {
    destinations[r] = g.has_central() ? std::vector<float*>{g.central().data()}
                                      : mirrored_destinations(weights, r);
  }
  return destinations;
}

/// One replica's forward and backward pass, timed, its error kept: the user's code, which reads
/// only the thread's hold and its own arguments (a replica abandoned in it must find, when it
/// comes back, nothing of the run to write to).
struct LockStepPass {
  float loss = 0.0f;
  double seconds = 0.0;
  std::exception_ptr thrown;
};
template <class Hold, class Context>
LockStepPass compute_pass(Hold const& hold, Context const& ctx, std::size_t r, std::int64_t local,
                          bool sums_on_host, GradientPlaces& places) {
  LockStepPass pass;
  try {
    Batch const batch = hold.plan->batch(r, local);
    auto const start = std::chrono::steady_clock::now();
    places.reset();
    pass.loss = forward_backward_leaving(*hold.model, batch, ctx, places);
    if (sums_on_host) settle_on_host(ctx);  // the sum reads the gradients on the host
    pass.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (...) {
    pass.thrown = std::current_exception();
  }
  return pass;
}

/// Thread r's share of a step's update: the sum, the optimizer and the broadcast of its chunk
/// (reduce_apply_broadcast); what it threw, if anything. Library code, not timed: it always
/// finishes, and an abandoned thread must not be in it. `sources` is room for a pointer a replica.
template <class Group, class Context>
std::exception_ptr update_chunk(Group& g, Context const& sum_ctx,
                                std::vector<std::vector<float*>> const& destinations,
                                std::span<float const*> sources, std::size_t r) noexcept {
  std::size_t const n = g.layout().element_count();
  auto const [begin, end] = chunk_bounds(n, g.size(), r);
  try {
    reduce_apply_broadcast(sum_ctx, std::span<GradientPlaces const>(g.gradient_places()), sources,
                           begin, end, destinations[r], n, g.optimizer(), g.slots(),
                           g.slots().updates + 1);
    return {};
  } catch (...) {
    return std::current_exception();
  }
}

/// At a run's end: the arenas hold the last gradients, as the Model contract says. An abandoned
/// replica's next pass frees what its places point to: they point at its arena again.
inline void settle_places(std::span<GradientPlaces> places,
                          std::span<std::size_t const> abandoned) {
  for (std::size_t r = 0; r < places.size(); ++r) {
    if (std::ranges::find(abandoned, r) != abandoned.end()) {
      places[r].reset();
    } else {
      places[r].settle();
    }
  }
}

/// Runs `plan` in lock step: one thread per replica, two barriers a step. Blocks until the run
/// ends. Returns the replicas abandoned for outlasting `timeout` (their threads still run); else
/// rethrows the first exception any replica, the optimizer or after_step raised, once every thread
/// has stopped.
template <class Group>
std::vector<std::size_t> run_lock_step(std::shared_ptr<Group> const& group_ptr,
                                       std::shared_ptr<RunPlan const> const& plan_ptr,
                                       std::chrono::milliseconds timeout) {
  Group& g = *group_ptr;
  RunPlan const& plan = *plan_ptr;
  std::size_t const replicas = g.size();
  auto& counters = g.counters();
  if (plan.reached(counters.global_step, counters.batches())) return {};

  auto const destinations = lock_step_destinations(g);
  auto const places = g.gradient_places();
  std::vector<float> losses(replicas);
  std::vector<double> seconds(replicas);
  // On the heap: ThreadSanitizer forgets a mutex only when its memory is freed (see
  // run_central_store).
  auto const error_holder = std::make_unique<FirstError>();
  auto const barrier_holder = std::make_unique<StepBarrier>(replicas);
  auto& error = *error_holder;
  auto& barrier = *barrier_holder;
  std::atomic<bool> failed{false};
  bool stop = false;  // written only by a barrier's completion, read after the barrier
  auto watch = std::make_shared<Watch>(replicas, timeout);

  auto after_gradients = [&]() noexcept {
    if (failed.load()) stop = true;
  };
  WaitNotice notice(replicas, &std::clog);
  auto step_end = std::chrono::steady_clock::now();
  auto after_update = [&]() noexcept {
    if (failed.load()) {
      stop = true;
      return;
    }
    auto const now = std::chrono::steady_clock::now();
    double mean_compute = 0.0;
    for (double s : seconds) mean_compute += s / static_cast<double>(replicas);
    try {
      notice.step(std::chrono::duration<double>(now - step_end).count(), mean_compute);
    } catch (...) {  // a log that throws costs the notice, not the run
    }
    step_end = now;
    ++g.slots().updates;
    if (count_lock_step(counters, losses, seconds[0], 0, plan, error)) stop = true;
  };
  auto replica_loop = [&](std::size_t r) {
    ThreadHold const hold(group_ptr, plan_ptr, watch, r);
    auto const ctx = g.context(r);
    auto const scope = ctx.enter();
    // A copy on this thread's stack: the loop reads it between begin() and end() below.
    bool const sums_on_host = replicas > 1;
    auto const sum_ctx = sums_on_host ? host_side(ctx) : ctx;  // made once, not at every step
    GradientPlaces own = places[r];  // the pass writes this copy, on this thread's stack
    std::vector<float const*> sources(replicas);
    for (;;) {
      // Between begin() and end() only this thread's own stack is read: begin() releases what came
      // before to the watching thread, which acquires it if it abandons this replica.
      auto const local = counters.local_steps[r];
      hold.watch->begin(r);
      auto pass = compute_pass(hold, ctx, r, local, sums_on_host, own);
      if (!hold.watch->end(r)) return;  // abandoned: the run and its state are gone
      places[r] = own;
      losses[r] = pass.loss;
      seconds[r] = pass.seconds;
      std::exception_ptr thrown = std::move(pass.thrown);
      if (thrown) {
        error.capture(thrown);
        failed = true;
      }
      if (!barrier.arrive_and_wait(after_gradients) || stop) return;
      if (auto const update_error = update_chunk(g, sum_ctx, destinations, sources, r)) {
        error.capture(update_error);
        failed = true;
      }
      if (!barrier.arrive_and_wait(after_update) || stop) return;
    }
  };
  auto const stuck = run_replica_threads(replicas, watch, replica_loop, [&] { barrier.abort(); });
  settle_places(places, stuck);
  if (!stuck.empty()) return stuck;
  error.rethrow();
  return stuck;
}

}  // namespace convoy::comm::in_process
