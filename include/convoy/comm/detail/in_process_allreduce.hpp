// The synchronous in-process engine: replicas are threads that meet at a barrier after computing
// their gradients; thread t then sums chunk t of every replica's gradients, applies the optimizer
// to chunk t (reduce-scatter) and, when each replica keeps its own weights, writes the updated
// chunk into every replica (all-gather), block by block in one pass; a second barrier ends the
// step. Sums run in replica order, so runs are bit-identical.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#if defined(__SSE__)
#include <immintrin.h>
#endif
#include <span>
#include <thread>
#include <vector>

#include "../../math/host.hpp"
#include "../../train/step.hpp"
#include "replica_state.hpp"
#include "step_barrier.hpp"

namespace convoy::comm::detail {

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

/// Sums chunk [begin, end) of `grads` block by block, applies the optimizer to the same range of
/// `weights[0]` with the gradients scaled by 1/replicas, and copies each updated block into the
/// other `weights` arenas while it is still in L1: reduce-scatter and all-gather in one pass, with
/// the update fused in, so the summed gradients are never written to memory and no replica has to
/// read back what another updated.
inline void reduce_apply_broadcast(std::span<float const* const> grads, std::size_t begin,
                                   std::size_t end, std::span<float* const> weights,
                                   std::size_t arena_size, optim::Optimizer const& opt,
                                   optim::OptimizerState& slots, std::int64_t update) {
  alignas(64) std::array<float, reduce_block> acc;
  float const scale = 1.0f / static_cast<float>(grads.size());
  std::span<float> const updated(weights[0], arena_size);
  bool const streaming = arena_size >= streaming_floats;
  for (std::size_t at = begin; at < end; at += reduce_block) {
    std::size_t const count = std::min(reduce_block, end - at);
    sum_block(grads, at, count, acc.data());
    opt.apply(updated, std::span<float const>(acc.data(), count), slots, at, scale, update);
    for (std::size_t d = 1; d < weights.size(); ++d)
      copy_block(weights[d] + at, weights[0] + at, count, streaming);
  }
#if defined(__SSE__)
  if (streaming)
    _mm_sfence();  // non-temporal stores are weakly ordered: finish them before the barrier
#endif
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

/// Runs `plan` with one thread per replica (the calling thread is replica 0). Blocks until the run
/// ends; rethrows the first exception a replica raised after every thread has stopped. A replica
/// that keeps the others waiting longer than `timeout` is named on std::clog. The optimizer state
/// must match the optimizer (Strategy::run checks), so nothing past forward_backward can throw.
template <class M>
void run_allreduce(ReplicaState<M>& s, RunPlan const& plan, bool shared_weights,
                   std::chrono::milliseconds timeout) {
  std::size_t const replicas = s.replicas.size();
  std::size_t const n = s.replicas[0].variables().element_count();
  if (s.step >= plan.until) return;

  std::vector<float const*> grads(replicas);
  std::vector<float*> weights(replicas);
  for (std::size_t r = 0; r < replicas; ++r) {
    grads[r] = s.replicas[r].variables().grads().data();
    weights[r] = s.replicas[r].variables().weights().data();
  }
  // Where each thread's chunk goes: the central copy, or every replica's weights.
  std::vector<std::vector<float*>> destinations(replicas);
  for (std::size_t r = 0; r < replicas; ++r) {
    destinations[r] =
        shared_weights ? std::vector<float*>{s.central.data()} : mirrored_destinations(weights, r);
  }
  std::vector<float> losses(replicas);
  std::vector<double> seconds(replicas);
  FirstError error;
  std::atomic<bool> failed{false};
  bool stop = false;  // written only by a barrier's completion, read after the barrier
  StepBarrier barrier(replicas, timeout);

  auto after_gradients = [&]() noexcept {
    if (failed.load()) stop = true;
  };
  auto after_update = [&]() noexcept {
    ++s.step;
    ++s.slots.updates;
    s.global_step += static_cast<std::int64_t>(replicas);
    for (auto& local : s.local_steps) ++local;
    float loss = 0.0f;
    for (float l : losses) loss += l;
    StepReport const report{.step = s.step,
                            .global_step = s.global_step,
                            .local_step = s.local_steps[0],
                            .replica = 0,
                            .loss = loss / static_cast<float>(replicas),
                            .seconds = seconds[0],
                            .dropped = s.dropped};
    try {
      if (plan.after_step && !plan.after_step(report)) stop = true;
    } catch (...) {
      error.capture();
      stop = true;
    }
    if (s.step >= plan.until) stop = true;
  };
  auto replica_loop = [&](std::size_t r) {
    auto& model = s.replicas[r];
    auto [begin, end] = chunk_bounds(n, replicas, r);
    for (;;) {
      try {
        Batch const batch = plan.batch(r, s.local_steps[r]);
        auto const start = std::chrono::steady_clock::now();
        losses[r] = static_cast<float>(model.forward_backward(batch));
        seconds[r] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      } catch (...) {
        error.capture();
        failed = true;
      }
      barrier.arrive_and_wait(r, after_gradients);
      if (stop) return;
      reduce_apply_broadcast(grads, begin, end, destinations[r], n, s.optimizer, s.slots,
                             s.slots.updates + 1);
      barrier.arrive_and_wait(r, after_update);
      if (stop) return;
    }
  };
  run_on_replica_threads(replicas, replica_loop);
  error.rethrow();
}

/// One replica on the calling thread: compute, update, report. No barrier, no copy.
template <class M>
void run_single(ReplicaState<M>& s, RunPlan const& plan) {
  math::OneThreadPerReplica const one_thread;
  auto& vars = s.replicas[0].variables();
  while (s.step < plan.until) {
    Batch const batch = plan.batch(0, s.local_steps[0]);
    auto const start = std::chrono::steady_clock::now();
    float const loss = static_cast<float>(s.replicas[0].forward_backward(batch));
    double const seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    s.optimizer.apply(vars.weights(), vars.grads(), s.slots, 0, 1.0f, s.slots.updates + 1);
    ++s.slots.updates;
    ++s.step;
    ++s.global_step;
    ++s.local_steps[0];
    StepReport const report{.step = s.step,
                            .global_step = s.global_step,
                            .local_step = s.local_steps[0],
                            .loss = loss,
                            .seconds = seconds,
                            .dropped = s.dropped};
    if (plan.after_step && !plan.after_step(report)) return;
  }
}

}  // namespace convoy::comm::detail
