// Adam (Kingma & Ba) with bias correction. Slots "m" and "v".
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

namespace convoy::optim {

namespace detail {
/// Adam's update of element i, the bias corrections folded into alpha (a named kernel: see
/// SgdStep).
struct AdamStep {
  using compiled_kernel = void;
  float* w;
  float const* g;
  float* m;
  float* v;
  float alpha, b1, b2, eps, scale;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const {
    float const gi = scale * g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
  }
};
}  // namespace detail

struct Adam {
  static constexpr std::string_view name = "Adam";
  static constexpr std::array<std::string_view, 2> slot_names{"m", "v"};
  float learning_rate = 0.001f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;

  template <class Context>
  void apply(Context const& ctx, Update const& u) const {
    auto const t = static_cast<double>(std::max<std::int64_t>(u.step, 1));  // steps count from 1
    // Bias corrections folded into the step size, as the paper's section 2 suggests.
    float const alpha = static_cast<float>(learning_rate * std::sqrt(1.0 - std::pow(beta2, t)) /
                                           (1.0 - std::pow(beta1, t)));
    math::for_each_index(ctx, u.weights.size(),
                         detail::AdamStep{u.weights.data(), u.grads.data(), u.slots[0], u.slots[1],
                                          alpha, beta1, beta2, epsilon, u.grad_scale});
  }
  friend bool operator==(Adam const&, Adam const&) = default;
};

}  // namespace convoy::optim
