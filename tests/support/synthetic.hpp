// Small, learnable classification data for strategy tests: class k's examples are Gaussian noise
// around a mean that is 1.5 on every feature j with j % classes == k.
#pragma once

#include <convoy/io/dataset.hpp>
#include <cstdint>
#include <random>

namespace convoy::testing {

inline io::Dataset synthetic_classes(std::size_t rows, std::size_t cols, std::size_t classes,
                                     std::uint64_t seed = 1) {
  io::Dataset data{.name = "synthetic", .cols = cols};
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::size_t i = 0; i < rows; ++i) {
    auto const label = static_cast<std::int32_t>(i % classes);
    for (std::size_t c = 0; c < cols; ++c) {
      data.features.push_back(noise(engine) +
                              (c % classes == static_cast<std::size_t>(label) ? 1.5f : 0.0f));
    }
    data.labels.push_back(label);
  }
  return data;
}

}  // namespace convoy::testing
