// SGD with momentum: v = momentum * v + g; w -= learning_rate * v. Slot "momentum".
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

namespace detail {
/// v = mu * v + scale * g; w -= lr * v, element i (a named kernel: see SgdStep).
struct MomentumStep {
  using compiled_kernel = void;
  float* w;
  float const* g;
  float* v;
  float lr, mu, scale;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const {
    v[i] = mu * v[i] + scale * g[i];
    w[i] -= lr * v[i];
  }
};
}  // namespace detail

struct Momentum {
  static constexpr std::string_view name = "Momentum";
  static constexpr std::array<std::string_view, 1> slot_names{"momentum"};
  float learning_rate = 0.01f;
  float momentum = 0.9f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    math::for_each_index(ctx, u.weights.size(),
                         detail::MomentumStep{u.weights.data(), u.grads.data(), u.slots[0],
                                              learning_rate, momentum, u.grad_scale});
  }
  friend bool operator==(Momentum const&, Momentum const&) = default;
};

}  // namespace convoy::optim
