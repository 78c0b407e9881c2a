// ReLU, forward in place and backward through the forward's output.
#pragma once

#include <cstddef>
#include <span>

#include "../core/host_device.hpp"
#include "../math/host.hpp"

namespace convoy::nn {

namespace detail {
// Named kernels, so that a build with convoy::cuda compiles their device code once
// (math/cuda_compiled.hpp).
struct ReluForward {
  using compiled_kernel = void;
  float* p;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { p[i] = p[i] > 0.0f ? p[i] : 0.0f; }
};
struct ReluBackward {
  using compiled_kernel = void;
  float const* out;
  float* g;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { g[i] = out[i] > 0.0f ? g[i] : 0.0f; }
};
}  // namespace detail

/// x = max(x, 0), in place.
template <class Context>
void relu_forward(Context const& ctx, std::span<float> x) {
  math::for_each_index(ctx, x.size(), detail::ReluForward{x.data()});
}

/// dy = y > 0 ? dy : 0, in place; `y` is relu_forward's output.
template <class Context>
void relu_backward(Context const& ctx, std::span<float const> y, std::span<float> dy) {
  math::for_each_index(ctx, dy.size(), detail::ReluBackward{y.data(), dy.data()});
}

}  // namespace convoy::nn
