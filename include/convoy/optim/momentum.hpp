// SGD with momentum: v = momentum * v + g; w -= learning_rate * v. Slot "momentum".
#pragma once

#include <array>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

struct Momentum {
  static constexpr std::string_view name = "Momentum";
  static constexpr std::array<std::string_view, 1> slot_names{"momentum"};
  float learning_rate = 0.01f;
  float momentum = 0.9f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    float* w = u.weights.data();
    float const* g = u.grads.data();
    float* v = u.slots[0];
    float const lr = learning_rate, mu = momentum, scale = u.grad_scale;
    math::for_each_index(ctx, u.weights.size(), [=] CONVOY_HOST_DEVICE(std::size_t i) {
      v[i] = mu * v[i] + scale * g[i];
      w[i] -= lr * v[i];
    });
  }
  friend bool operator==(Momentum const&, Momentum const&) = default;
};

}  // namespace convoy::optim
