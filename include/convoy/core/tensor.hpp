// Shapes and owning tensors: the values that travel by name in get_weights()/set_weights() and in
// saved files. A Tensor owns its floats; views into an arena are plain std::span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "error.hpp"

namespace convoy {

/// Dimensions of a tensor, outermost first (a dense kernel is {inputs, outputs}).
using Shape = std::vector<std::size_t>;

/// Number of elements a shape holds; an empty shape is a scalar and holds one.
inline std::size_t element_count(Shape const& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>{});
}

/// "{784, 500}", for messages.
inline std::string to_string(Shape const& shape) {
  std::string text = "{";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "}";
}

/// An owning float tensor. Regular: copyable and comparable.
struct Tensor {
  Shape shape;
  std::vector<float> data;

  Tensor() = default;
  /// A zero-filled tensor of `shape`.
  explicit Tensor(Shape s) : shape(std::move(s)), data(element_count(shape), 0.0f) {}
  /// Throws ShapeError when `values` does not hold exactly element_count(shape) floats.
  Tensor(Shape s, std::vector<float> values) : shape(std::move(s)), data(std::move(values)) {
    if (data.size() != element_count(shape)) {
      throw ShapeError("convoy: a tensor of shape " + to_string(shape) + " needs " +
                       std::to_string(element_count(shape)) + " values, got " +
                       std::to_string(data.size()));
    }
  }

  friend bool operator==(Tensor const&, Tensor const&) = default;
};

}  // namespace convoy
