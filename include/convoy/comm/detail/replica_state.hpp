// The state a strategy trains: its replicas, the central weights when there are any, the optimizer
// and its slots, and the step counters. Shared by the engines in this folder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

#include "../../optim/optimizer.hpp"

namespace convoy::comm::detail {

template <class M>
struct ReplicaState {
  std::vector<M> replicas;
  std::vector<float> central;  ///< the weights all replicas share or pull from; empty when mirrored
  optim::Optimizer optimizer{optim::Sgd{}};
  optim::OptimizerState slots;
  std::int64_t step = 0;
  std::int64_t global_step = 0;
  std::int64_t dropped = 0;
  std::vector<std::int64_t> local_steps;
};

/// [begin, end) of part `index` of `parts` over n floats; bounds fall on 64-byte lines so two
/// threads never write one cache line.
inline std::pair<std::size_t, std::size_t> chunk_bounds(std::size_t n, std::size_t parts,
                                                        std::size_t index) {
  constexpr std::size_t line = 16;
  std::size_t const per = (n + parts - 1) / parts;
  std::size_t const rounded = (per + line - 1) / line * line;
  std::size_t const begin = std::min(n, index * rounded);
  return {begin, std::min(n, begin + rounded)};
}

/// The first exception any replica thread raised; the others are dropped.
class FirstError {
 public:
  void capture() {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
  }
  bool has() const {
    std::lock_guard lock(mutex_);
    return static_cast<bool>(error_);
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace convoy::comm::detail
