// The cluster tests' model and data: a small MLP on synthetic classes, slowed on purpose where a
// test needs a kill or a straggler to land mid-run. One definition, so the tests that compare a
// cluster with in-process Mirrored, or with each other, train the same thing.
#pragma once

#include <chrono>
#include <functional>
#include <convoy/core/batch.hpp>
#include <convoy/core/variables.hpp>
#include <convoy/io/dataset.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/optim/optimizer.hpp>
#include <thread>

#include "synthetic.hpp"

namespace convoy::testing {

inline io::Dataset cluster_data() { return synthetic_classes(480, 12, 3); }
inline nn::Mlp cluster_mlp() { return nn::Mlp({12, 16, 3}); }
inline optim::Optimizer cluster_optimizer() { return optim::Adam{0.01f}; }

/// cluster_mlp(), sleeping `sleep_ms` before each step; `on_batch`, where set, is called for every
/// batch computed, also one whose gradients arrive late and are dropped (no update reports it).
struct SlowMlp {
  nn::Mlp mlp = cluster_mlp();
  int sleep_ms = 0;
  std::function<void(Batch const&)> on_batch = {};
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& batch) {
    if (on_batch) on_batch(batch);
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    return mlp.forward_backward(batch);
  }
  Metrics evaluate(Batch const& batch) { return mlp.evaluate(batch); }
};

}  // namespace convoy::testing
