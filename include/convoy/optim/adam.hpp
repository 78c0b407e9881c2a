// Adam (Kingma & Ba) with bias correction. Slots "m" and "v".
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../core/host_device.hpp"
#include "../math/host.hpp"
#include "update.hpp"

#if defined(__SSE2__)
#include <immintrin.h>
#define CONVOY_ADAM_SSE 1
#endif

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
  /// Elements [begin, end) on the host, four at a time where SSE is: the same operations in the
  /// same order as operator(), each correctly rounded, so the same bits. A loop over operator()
  /// stays scalar: std::sqrt may set errno (for a negative argument, which v never holds), and
  /// that call keeps GCC's and Clang's vectorizers out unless the program is built with
  /// -fno-math-errno. Adam was a third of the Fashion-MNIST MLP's training time (perf, 2026-12-01).
  void host_range(std::size_t begin, std::size_t end) const {
    std::size_t i = begin;
#ifdef CONVOY_ADAM_SSE
    __m128 const b1v = _mm_set1_ps(b1), rest1 = _mm_set1_ps(1.0f - b1);
    __m128 const b2v = _mm_set1_ps(b2), rest2 = _mm_set1_ps(1.0f - b2);
    __m128 const alphav = _mm_set1_ps(alpha), epsv = _mm_set1_ps(eps), scalev = _mm_set1_ps(scale);
    for (; i + 4 <= end; i += 4) {
      __m128 const gi = _mm_mul_ps(scalev, _mm_loadu_ps(g + i));
      __m128 const mi = _mm_add_ps(_mm_mul_ps(b1v, _mm_loadu_ps(m + i)), _mm_mul_ps(rest1, gi));
      __m128 const vi =
          _mm_add_ps(_mm_mul_ps(b2v, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(rest2, gi), gi));
      _mm_storeu_ps(m + i, mi);
      _mm_storeu_ps(v + i, vi);
      __m128 const step = _mm_div_ps(_mm_mul_ps(alphav, mi), _mm_add_ps(_mm_sqrt_ps(vi), epsv));
      _mm_storeu_ps(w + i, _mm_sub_ps(_mm_loadu_ps(w + i), step));
    }
#endif
    for (; i < end; ++i) (*this)(i);
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
    detail::AdamStep const kernel{
        u.weights.data(), u.grads.data(), u.slots[0], u.slots[1], alpha, beta1, beta2,
        epsilon,          u.grad_scale};
    if constexpr (std::derived_from<Context, exec::Host>) {
      math::for_each_range(ctx, u.weights.size(), [&](std::size_t begin, std::size_t end) {
        kernel.host_range(begin, end);
      });
    } else {
      math::for_each_index(ctx, u.weights.size(), kernel);
    }
  }
  friend bool operator==(Adam const&, Adam const&) = default;
};

}  // namespace convoy::optim
