// ReLU, forward in place and backward through the forward's output.
#pragma once

#include <span>

#include "../core/host_device.hpp"
#include "../math/host.hpp"

namespace convoy::nn {

/// x = max(x, 0), in place.
template <class Context>
void relu_forward(Context const& ctx, std::span<float> x) {
  float* p = x.data();
  math::for_each_index(ctx, x.size(), [=] CONVOY_HOST_DEVICE(std::size_t i) { p[i] = p[i] > 0.0f ? p[i] : 0.0f; });
}

/// dy = y > 0 ? dy : 0, in place; `y` is relu_forward's output.
template <class Context>
void relu_backward(Context const& ctx, std::span<float const> y, std::span<float> dy) {
  float const* out = y.data();
  float* g = dy.data();
  math::for_each_index(ctx, dy.size(), [=] CONVOY_HOST_DEVICE(std::size_t i) { g[i] = out[i] > 0.0f ? g[i] : 0.0f; });
}

}  // namespace convoy::nn
