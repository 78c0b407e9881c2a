// The model of examples 00 and 01: y = w x + b fitted by mean squared error to data from
// y = 0.1 x + 0.3, with a user-written forward_backward. It is all a type needs to be a convoy
// model.
#pragma once

#include <convoy/core/batch.hpp>
#include <convoy/core/variables.hpp>
#include <convoy/io/dataset.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "options.hpp"

namespace examples {

class LinearModel {
 public:
  explicit LinearModel(std::string scope = "linear") : vars_(std::move(scope)) {
    w_ = vars_.add("w", {1});
    b_ = vars_.add("b", {1});
    std::uniform_real_distribution<float> uniform(-1.0f,
                                                  1.0f);  // w ~ U(-1, 1), b = 0, as in the Ray text
    vars_.value(w_)[0] = uniform(vars_.rng());
  }

  convoy::Variables& variables() { return vars_; }

  /// Mean squared error of w x + b against the targets; writes d/dw and d/db.
  float forward_backward(convoy::Batch const& batch) {
    float const w = vars_.value(w_)[0], b = vars_.value(b_)[0];
    float loss = 0.0f, dw = 0.0f, db = 0.0f;
    for (std::size_t i = 0; i < batch.rows; ++i) {
      float const err = w * batch.features[i] + b - batch.targets[i];
      loss += err * err;
      dw += 2.0f * err * batch.features[i];
      db += 2.0f * err;
    }
    float const n = static_cast<float>(batch.rows);
    vars_.grad(w_)[0] = dw / n;
    vars_.grad(b_)[0] = db / n;
    return loss / n;
  }

 private:
  convoy::Variables vars_;
  convoy::VariableId w_, b_;
};

/// `rows` points x ~ U(0, 1) with y = 0.1 x + 0.3 (the Ray text's generate_fake_x_y_data).
inline convoy::io::Dataset fake_xy_data(std::size_t rows, std::uint64_t seed) {
  convoy::io::Dataset data{
      .name = "y = 0.1 x + 0.3, seed " + std::to_string(seed), .cols = 1, .target_cols = 1};
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    float const x = uniform(engine);
    data.features.push_back(x);
    data.targets.push_back(0.1f * x + 0.3f);
  }
  return data;
}

/// Reads "--iterations N" and "--replicas N" (the only options of examples 00 and 01); anything
/// else, or a value that is not a whole number in range, is a UsageError naming it.
inline void parse_options(int argc, char** argv, int& iterations, int& replicas) {
  parse_flags(argc, argv, "options: [--iterations N (1-1000000)] [--replicas N (1-64)]\n",
              [&](std::string_view flag, std::string_view value) {
                if (flag == "--iterations") {
                  iterations = parse_integer(flag, value, 1, 1'000'000, "expected 1 to 1000000");
                } else if (flag == "--replicas") {
                  replicas = parse_integer(flag, value, 1, 64, "expected 1 to 64");
                } else {
                  return false;
                }
                return true;
              });
}

}  // namespace examples
