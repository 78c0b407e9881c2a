// Plain stochastic gradient descent: w -= learning_rate * g.
#pragma once

#include <array>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

struct Sgd {
  static constexpr std::string_view name = "Sgd";
  static constexpr std::array<std::string_view, 0> slot_names{};
  float learning_rate = 0.01f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    float* w = u.weights.data();
    float const* g = u.grads.data();
    float const step = learning_rate * u.grad_scale;
    math::for_each_index(ctx, u.weights.size(), [=] CONVOY_HOST_DEVICE(std::size_t i) { w[i] -= step * g[i]; });
  }
  friend bool operator==(Sgd const&, Sgd const&) = default;
};

}  // namespace convoy::optim
