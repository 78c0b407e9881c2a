// Plain stochastic gradient descent: w -= learning_rate * g.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

namespace detail {
/// w -= step * g, element i: a named kernel, so that a build with convoy::cuda compiles its device
/// code once (math/cuda_compiled.hpp).
struct SgdStep {
  using compiled_kernel = void;
  float* w;
  float const* g;
  float step;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { w[i] -= step * g[i]; }
};
}  // namespace detail

struct Sgd {
  static constexpr std::string_view name = "Sgd";
  static constexpr std::array<std::string_view, 0> slot_names{};
  float learning_rate = 0.01f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    math::for_each_index(
        ctx, u.weights.size(),
        detail::SgdStep{u.weights.data(), u.grads.data(), learning_rate * u.grad_scale});
  }
  friend bool operator==(Sgd const&, Sgd const&) = default;
};

}  // namespace convoy::optim
