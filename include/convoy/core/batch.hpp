// Batch and Metrics: what a model's forward_backward() and evaluate() receive and return.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace convoy {

/// A view of `rows` examples. Row-major `features` (rows x cols); `labels` for classification and
/// `targets` (rows x target columns) for regression, either of which may be empty. Never owns.
struct Batch {
  std::span<float const> features;
  std::span<std::int32_t const> labels;
  std::span<float const> targets;
  std::size_t rows = 0;

  std::size_t cols() const { return rows ? features.size() / rows : 0; }
};

/// Sums over evaluated examples; add them up across batches and replicas.
struct Metrics {
  double loss_sum = 0.0;
  std::size_t correct = 0;
  std::size_t count = 0;

  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  Metrics& operator+=(Metrics const& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    return *this;
  }
};

}  // namespace convoy
