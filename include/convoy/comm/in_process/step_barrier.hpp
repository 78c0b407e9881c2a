// StepBarrier: the meeting point of the lock-step engine. Arrivals spin briefly (replicas usually
// arrive within microseconds of each other, and a futex sleep and wake-up costs more than the
// whole exchange of a small model) and then block. abort() releases every waiter for good, which is
// how a run ends when a replica fails or is stuck: nobody waits at a barrier for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#if defined(__SSE2__)
// _mm_pause is SSE2 (GCC declares it in <xmmintrin.h>, Clang in <emmintrin.h>); <immintrin.h>
// would parse every AVX-512 header for it.
#include <emmintrin.h>
#endif

namespace convoy::comm::in_process {

class StepBarrier {
 public:
  explicit StepBarrier(std::size_t parties) : parties_(parties) {}

  /// Blocks until all parties have arrived; the last to arrive runs `complete()` (which must not
  /// throw) before anyone is released, so its effects are visible to every party afterwards.
  /// Returns false, at once or while waiting, once abort() has been called.
  template <class Complete>
  bool arrive_and_wait(Complete&& complete) {
    std::uint64_t const generation = generation_.load(std::memory_order_acquire);
    if (aborted_.load(std::memory_order_acquire)) return false;
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
      waiting_.store(0, std::memory_order_relaxed);
      complete();
      {
        std::lock_guard lock(mutex_);
        generation_.store(generation + 1, std::memory_order_release);
      }
      released_.notify_all();
      return !aborted_.load(std::memory_order_acquire);
    }
    for (int spin = 0; spin < spin_limit; ++spin) {
      if (generation_.load(std::memory_order_acquire) != generation) return true;
      if (aborted_.load(std::memory_order_relaxed)) return false;
      if (spin < spin_limit / 2) {
        pause();
      } else {
        std::this_thread::yield();  // oversubscribed cores: let the others run
      }
    }
    std::unique_lock lock(mutex_);
    released_.wait(lock, [&] {
      return generation_.load(std::memory_order_acquire) != generation ||
             aborted_.load(std::memory_order_acquire);
    });
    return generation_.load(std::memory_order_acquire) != generation;
  }

  /// Releases every waiter now and every later arrival at once, with false. Thread-safe.
  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_.store(true, std::memory_order_release);
    }
    released_.notify_all();
  }

 private:
  static void pause() {
#if defined(__SSE2__)
    _mm_pause();  // tells the core this is a spin, which frees resources for a sibling thread
#endif
  }

  static constexpr int spin_limit = 20000;
  std::size_t const parties_;
  std::atomic<std::size_t> waiting_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::mutex mutex_;
  std::condition_variable released_;
};

}  // namespace convoy::comm::in_process
