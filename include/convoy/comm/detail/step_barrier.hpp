// StepBarrier: the meeting point of the synchronous in-process engine. Arrivals spin briefly
// (replicas usually arrive within microseconds of each other, and a futex sleep and wake-up costs
// more than the whole exchange of a small model) and then block. A blocked wait that outlasts the
// timeout says on std::clog which replicas have not arrived, and keeps saying so, instead of
// hanging in silence: a replica stuck inside user code cannot be interrupted from another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace convoy::comm::detail {

class StepBarrier {
 public:
  /// `timeout` must be positive (Strategy checks the policies' timeouts).
  StepBarrier(std::size_t parties, std::chrono::milliseconds timeout)
      : parties_(parties), timeout_(timeout), arrivals_(parties) {}

  /// Blocks until all parties have arrived; the last to arrive runs `complete()` (which must not
  /// throw) before anyone is released, so its effects are visible to every party afterwards.
  template <class Complete>
  void arrive_and_wait(std::size_t party, Complete&& complete) {
    std::uint64_t const generation = generation_.load(std::memory_order_acquire);
    arrivals_[party].store(generation + 1, std::memory_order_relaxed);
    if (waiting_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_) {
      waiting_.store(0, std::memory_order_relaxed);
      complete();
      {
        std::lock_guard lock(mutex_);
        generation_.store(generation + 1, std::memory_order_release);
      }
      released_.notify_all();
      return;
    }
    for (int spin = 0; spin < spin_limit; ++spin) {
      if (generation_.load(std::memory_order_acquire) != generation) return;
      if (spin < spin_limit / 2) {
        pause();
      } else {
        std::this_thread::yield();  // oversubscribed cores: let the others run
      }
    }
    std::unique_lock lock(mutex_);
    auto const started = std::chrono::steady_clock::now();
    while (!released_.wait_for(lock, timeout_, [&] {
      return generation_.load(std::memory_order_acquire) != generation;
    })) {
      std::string missing;
      for (std::size_t p = 0; p < parties_; ++p) {
        if (arrivals_[p].load(std::memory_order_relaxed) != generation + 1) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
        }
      }
      auto const waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started);
      std::clog << "convoy: replica " << party << " has waited " << waited.count() << " s "
                << (missing.empty() ? std::string("for the end of a step (after_step: logging, "
                                                  "evaluation or a checkpoint)")
                                    : "for replica(s) " + missing + " at a synchronous step")
                << "; still waiting (an in-process replica cannot be interrupted)\n";
    }
  }

 private:
  static void pause() {
#if defined(__SSE2__)
    _mm_pause();  // tells the core this is a spin, which frees resources for a sibling thread
#endif
  }

  static constexpr int spin_limit = 20000;
  std::size_t const parties_;
  std::chrono::milliseconds const timeout_;
  std::atomic<std::size_t> waiting_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::vector<std::atomic<std::uint64_t>> arrivals_;
  std::mutex mutex_;
  std::condition_variable released_;
};

}  // namespace convoy::comm::detail
