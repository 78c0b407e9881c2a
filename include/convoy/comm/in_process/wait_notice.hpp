// WaitNotice: replicas in lock step are only as fast as the slowest of them at every step. On a
// busy machine, or one with fewer free cores than replicas, they spend most of each step waiting
// for one another, and one replica can be faster than several. This watches the share of a step
// the replicas spend computing and says so, once, with what to change.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <ostream>

namespace convoy::comm::in_process {

class WaitNotice {
 public:
  /// Steps skipped first (start-up, caches), steps measured, and the computing share under which
  /// the notice is given.
  static constexpr std::size_t warm_up = 10, window = 50;
  static constexpr double threshold = 0.5;

  WaitNotice(std::size_t replicas, std::ostream* log) : replicas_(replicas), log_(log) {}

  /// One step ended: `wall` seconds since the previous one ended, of which each replica computed
  /// `mean_compute` seconds on average. True when this step's call gave the notice.
  bool step(double wall, double mean_compute) {
    if (replicas_ < 2 || done_ || !log_) return false;
    if (++steps_ <= warm_up) return false;
    wall_ += wall;
    compute_ += mean_compute;
    if (steps_ < warm_up + window) return false;
    done_ = true;
    if (wall_ <= 0.0 || compute_ >= threshold * wall_) return false;
    char line[512];
    std::snprintf(line, sizeof line,
                  "convoy: the %zu replicas computed for %.0f%% of each step (%.3f ms of %.3f ms) "
                  "and waited for one another for the rest: this machine is busy or has fewer free "
                  "cores than replicas. Fewer replicas (place::Mirrored{.replicas = 1}, or "
                  "--replicas 1 in the examples) may train faster; the speed-up replicas give "
                  "needs a free core each.",
                  replicas_, 100.0 * compute_ / wall_, 1e3 * compute_ / window, 1e3 * wall_ / window);
    *log_ << line << std::endl;
    return true;
  }

 private:
  std::size_t replicas_;
  std::ostream* log_;
  std::size_t steps_ = 0;
  double wall_ = 0.0, compute_ = 0.0;
  bool done_ = false;
};

}  // namespace convoy::comm::in_process
