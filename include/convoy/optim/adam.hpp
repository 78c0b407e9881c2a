// Adam (Kingma & Ba) with bias correction. Slots "m" and "v".
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

struct Adam {
  static constexpr std::string_view name = "Adam";
  static constexpr std::array<std::string_view, 2> slot_names{"m", "v"};
  float learning_rate = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    float* w = u.weights.data();
    float const* g = u.grads.data();
    float* m = u.slots[0];
    float* v = u.slots[1];
    auto const t = static_cast<double>(std::max<std::int64_t>(u.step, 1));  // steps count from 1
    // Bias corrections folded into the step size, as the paper's section 2 suggests.
    float const alpha = static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(beta2, t)) /
                                           (1.0 - std::pow(beta1, t)));
    float const b1 = beta1, b2 = beta2, eps = epsilon, scale = u.grad_scale;
    math::for_each_index(ctx, u.weights.size(), [=] CONVOY_HOST_DEVICE(std::size_t i) {
      float const gi = scale * g[i];
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    });
  }
  friend bool operator==(Adam const&, Adam const&) = default;
};

}  // namespace convoy::optim
