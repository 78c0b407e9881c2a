// The model and data of examples/04_own_model, in a header of their own so that the
// parameter-server test (tests/cluster/own_model_on_ps.cpp) runs the same model with the ps type
// line: docs/own_model.md walks through both parts.
#pragma once

#include <algorithm>
#include <cmath>
#include <convoy/convoy.hpp>
#include <cstddef>
#include <random>
#include <vector>

// (1) The model. Its weights live in its own Variables, under names that never change: they are
// how weights travel between replicas, files and checkpoints.
// example-begin model
class SoftmaxRegression {
 public:
  SoftmaxRegression(std::size_t features, std::size_t classes) : vars_("softmax") {
    w_ = vars_.add("w", {features, classes});  // "softmax/w", zero-initialised
    b_ = vars_.add("b", {classes});            // "softmax/b"
  }
  convoy::Variables& variables() { return vars_; }

  // Returns the batch's mean loss and OVERWRITES every gradient: convoy never clears them, so a
  // bare += would add up the gradients of every step since the start.
  float forward_backward(convoy::Batch const& batch) {
    auto dw = vars_.grad(w_), db = vars_.grad(b_);
    std::ranges::fill(dw, 0.0f);
    std::ranges::fill(db, 0.0f);
    float const n = static_cast<float>(batch.rows);
    float loss = 0.0f;
    for (std::size_t r = 0; r < batch.rows; ++r) {
      auto p = probabilities(batch, r);
      auto const label = static_cast<std::size_t>(batch.labels[r]);
      loss -= std::log(p[label]);
      p[label] -= 1.0f;  // d loss / d logits
      for (std::size_t c = 0; c < p.size(); ++c) {
        db[c] += p[c] / n;
        for (std::size_t j = 0; j < batch.cols(); ++j)
          dw[j * p.size() + c] += batch.features[r * batch.cols() + j] * p[c] / n;
      }
    }
    return loss / n;
  }

  // Optional, forward only: sums that Trainer::evaluate adds up over batches.
  convoy::Metrics evaluate(convoy::Batch const& batch) {
    convoy::Metrics m;
    for (std::size_t r = 0; r < batch.rows; ++r) {
      auto const p = probabilities(batch, r);
      auto const label = static_cast<std::size_t>(batch.labels[r]);
      m.loss_sum -= std::log(p[label]);
      m.correct += static_cast<std::size_t>(std::ranges::max_element(p) - p.begin()) == label;
      ++m.count;
    }
    return m;
  }

 private:
  std::vector<float> probabilities(convoy::Batch const& batch, std::size_t row) const {
    auto const w = vars_.value(w_), b = vars_.value(b_);
    std::vector<float> p(b.begin(), b.end());
    for (std::size_t c = 0; c < p.size(); ++c)
      for (std::size_t j = 0; j < batch.cols(); ++j)
        p[c] += batch.features[row * batch.cols() + j] * w[j * p.size() + c];
    float const top = std::ranges::max(p);
    float sum = 0.0f;
    for (float& v : p) sum += v = std::exp(v - top);
    for (float& v : p) v /= sum;
    return p;
  }

  convoy::Variables vars_;
  convoy::VariableId w_, b_;
};
// example-end model

// (2) The data: three Gaussian blobs 120 degrees apart, from our own vectors.
// example-begin data
convoy::io::Dataset blobs(char const* name, int rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.7f);
  convoy::io::DatasetBuilder builder{name, {.features = 2, .classes = 3}};
  for (int i = 0; i < rows; ++i) {
    float const angle = 2.0944f * static_cast<float>(i % 3);
    std::vector<float> const point{2 * std::cos(angle) + noise(rng),
                                   2 * std::sin(angle) + noise(rng)};
    builder.add(point, i % 3);  // throws, naming the row, for a wrong length or label
  }
  return std::move(builder).build();
}
// example-end data
