// Update: one optimizer step over a range of the arenas. Strategies cut the arena into chunks and
// hand each thread its own, so every optimizer is written element-wise over a range.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace convoy::optim {

struct Update {
  std::span<float> weights;       ///< the range being updated
  std::span<float const> grads;   ///< gradients for the same range
  std::array<float*, 2> slots{};  ///< the optimizer's slot arrays for the same range
  float grad_scale = 1.0f;        ///< gradients are multiplied by it first (1/replicas: a mean)
  std::int64_t step = 1;          ///< 1-based number of this update, for bias corrections
};

}  // namespace convoy::optim
