// The state a strategy trains (its replicas, the central weights when there are any, the optimizer
// and its slots, the step counters) and what every engine in this folder needs around it: chunking
// of the arenas, the first error of any replica, and starting the replica threads.
#pragma once

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/detail/aligned_allocator.hpp"
#include "../../math/host.hpp"
#include "../../optim/optimizer.hpp"

namespace convoy::comm::detail {

template <class M>
struct ReplicaState {
  std::vector<M> replicas;
  convoy::detail::AlignedVector<float>
      central;  ///< the weights replicas share or pull; empty when mirrored
  optim::Optimizer optimizer{optim::Sgd{}};
  optim::OptimizerState slots;
  std::int64_t step = 0;
  std::int64_t global_step = 0;
  std::int64_t dropped = 0;
  std::vector<std::int64_t> local_steps;
};

/// [begin, end) of part `index` of `parts` over n floats. Bounds are multiples of 16 floats, one
/// 64-byte line, and the arenas start on a line, so two threads never write the same line.
inline std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, std::size_t parts,
                                                        std::size_t index) {
  constexpr std::size_t floats_per_line = 16;
  std::size_t const per = (n + parts - 1) / parts;
  std::size_t const rounded = (per + floats_per_line - 1) / floats_per_line * floats_per_line;
  std::size_t const begin = std::min(n, index * rounded);
  return {begin, std::min(n, begin + rounded)};
}

/// The first exception any replica thread raised; later ones are dropped.
class FirstError {
 public:
  void capture(std::exception_ptr error = std::current_exception()) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

/// Runs loop(r) for r in [0, replicas): replica 0 on the calling thread, the others on threads of
/// their own, and returns when all have returned. The threads wait at a gate until every one of
/// them exists, so a failure to start one (it throws std::system_error) lets the others go home
/// instead of waiting at a barrier for a replica that never came. While it runs, math is
/// single-threaded (one OpenMP thread per replica thread, one OpenBLAS thread); the caller's
/// settings come back at the end. `loop` must not throw.
template <class Loop>
void run_on_replica_threads(std::size_t replicas, Loop& loop) {
  math::OneThreadPerReplica const caller;
  std::atomic<int> gate{0};  // 0: wait, 1: run, 2: abandon
  auto body = [&](std::size_t r) {
    omp_set_num_threads(1);  // per thread; OpenBLAS's process-wide setting is the caller's to make
    gate.wait(0);
    if (gate.load() == 1) loop(r);
  };
  std::vector<std::jthread> threads;
  threads.reserve(replicas);
  try {
    for (std::size_t r = 1; r < replicas; ++r) threads.emplace_back(body, r);
  } catch (...) {
    gate = 2;
    gate.notify_all();
    throw;  // the started threads see the gate abandoned and are joined on the way out
  }
  gate = 1;
  gate.notify_all();
  loop(0);
}

}  // namespace convoy::comm::detail
