// Losses: softmax cross-entropy for classification and mean squared error for regression. Each
// returns the batch's mean loss and writes the gradient of that mean with respect to its input.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "../core/batch.hpp"
#include "../core/error.hpp"
#include "../core/host_device.hpp"
#include "../math/host.hpp"

namespace convoy::nn {

namespace detail {
// Loss of one row of logits; writes softmax - onehot, scaled by `scale`, into grad when non-null.
// Runs on the host and on a device: the same code serves every context.
CONVOY_HOST_DEVICE inline float softmax_row(float const* z, std::int32_t label, std::size_t classes,
                                            float scale, float* grad, bool* correct) {
  float top = z[0];
  std::size_t arg = 0;
  for (std::size_t j = 1; j < classes; ++j) {
    if (z[j] > top) top = z[j], arg = j;
  }
  float sum = 0.0f;
  for (std::size_t j = 0; j < classes; ++j) sum += std::exp(z[j] - top);
  if (grad != nullptr) {
    float const inv = 1.0f / sum;
    for (std::size_t j = 0; j < classes; ++j) grad[j] = scale * std::exp(z[j] - top) * inv;
    grad[label] -= scale;
  }
  if (correct != nullptr) *correct = arg == static_cast<std::size_t>(label);
  return std::log(sum) - (z[label] - top);
}

// Row r's loss (and its gradient, into g when non-null), or with `count_correct` 1 for a correct
// prediction and 0 otherwise: a named kernel, so that a build with convoy::cuda compiles its device
// code once (math/cuda_compiled.hpp).
struct SoftmaxRows {
  using compiled_kernel = void;
  float const* z;
  std::int32_t const* y;
  std::size_t classes;
  float scale;
  float* g;
  bool count_correct;
  CONVOY_HOST_DEVICE double operator()(std::size_t r) const {
    if (count_correct) {
      bool hit = false;
      softmax_row(z + r * classes, y[r], classes, 0.0f, nullptr, &hit);
      return hit ? 1.0 : 0.0;
    }
    return static_cast<double>(softmax_row(z + r * classes, y[r], classes, scale,
                                           g != nullptr ? g + r * classes : nullptr, nullptr));
  }
};
}  // namespace detail

/// Mean softmax cross-entropy of `logits` (rows x classes) against `labels`; writes its gradient to
/// `dlogits` (same shape).
template <class Context>
float softmax_cross_entropy(Context const& ctx, std::span<float const> logits,
                            std::span<std::int32_t const> labels, std::size_t rows,
                            std::size_t classes, std::span<float> dlogits) {
  float const scale = 1.0f / static_cast<float>(rows);
  double const total = math::sum_over_indices(
      ctx, rows,
      detail::SoftmaxRows{logits.data(), labels.data(), classes, scale, dlogits.data(), false});
  return static_cast<float>(total / static_cast<double>(rows));
}

/// Loss sum and correct predictions of `logits` against `labels`, computed in `ctx`; no gradient.
template <class Context>
Metrics softmax_cross_entropy_metrics(Context const& ctx, std::span<float const> logits,
                                      std::span<std::int32_t const> labels, std::size_t rows,
                                      std::size_t classes) {
  Metrics m;
  m.loss_sum = math::sum_over_indices(
      ctx, rows, detail::SoftmaxRows{logits.data(), labels.data(), classes, 0.0f, nullptr, false});
  double const correct = math::sum_over_indices(
      ctx, rows, detail::SoftmaxRows{logits.data(), labels.data(), classes, 0.0f, nullptr, true});
  m.correct = static_cast<std::size_t>(correct + 0.5);
  m.count = rows;
  return m;
}

/// Mean over all elements of (prediction - target)^2; writes its gradient to `dprediction`.
inline float mean_squared_error(std::span<float const> prediction, std::span<float const> target,
                                std::span<float> dprediction) {
  if (prediction.empty() || target.size() != prediction.size() ||
      (!dprediction.empty() && dprediction.size() != prediction.size())) {
    throw ShapeError("convoy: mean_squared_error got " + std::to_string(prediction.size()) +
                     " predictions, " + std::to_string(target.size()) + " targets and " +
                     std::to_string(dprediction.size()) + " gradient slots");
  }
  double sum = 0.0;
  float const scale = 2.0f / static_cast<float>(prediction.size());
  for (std::size_t i = 0; i < prediction.size(); ++i) {
    float const diff = prediction[i] - target[i];
    sum += static_cast<double>(diff) * diff;
    if (!dprediction.empty()) dprediction[i] = scale * diff;
  }
  return static_cast<float>(sum / static_cast<double>(prediction.size()));
}

}  // namespace convoy::nn
