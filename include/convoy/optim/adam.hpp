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

#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
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
  /// Elements [begin, end) on the host, four at a time where SSE2 is: the same operations in the
  /// same order as operator(), each correctly rounded, so the same bits (unless the compiler
  /// contracts multiplies and adds into FMAs, -mfma with GCC's default -ffp-contract=fast: then a
  /// range's bits still do not depend on where it is cut, since its last elements go through
  /// the same four-wide block). A loop over operator() stays scalar: std::sqrt may set errno (for
  /// a negative argument, which v never holds), and that call keeps GCC's and Clang's vectorizers
  /// out unless the program is built with -fno-math-errno. Adam was a third of the Fashion-MNIST
  /// MLP's training time (perf, 2026-12-01). The arrays must not overlap but for being the same.
  void host_range(std::size_t begin, std::size_t end) const {
#ifdef CONVOY_ADAM_SSE
    __m128 const b1v = _mm_set1_ps(b1), rest1 = _mm_set1_ps(1.0f - b1);
    __m128 const b2v = _mm_set1_ps(b2), rest2 = _mm_set1_ps(1.0f - b2);
    __m128 const alphav = _mm_set1_ps(alpha), epsv = _mm_set1_ps(eps), scalev = _mm_set1_ps(scale);
    auto const block = [&](float* wp, float const* gp, float* mp, float* vp) {
      __m128 const gi = _mm_mul_ps(scalev, _mm_loadu_ps(gp));
      __m128 const mi = _mm_add_ps(_mm_mul_ps(b1v, _mm_loadu_ps(mp)), _mm_mul_ps(rest1, gi));
      __m128 const vi =
          _mm_add_ps(_mm_mul_ps(b2v, _mm_loadu_ps(vp)), _mm_mul_ps(_mm_mul_ps(rest2, gi), gi));
      _mm_storeu_ps(mp, mi);
      _mm_storeu_ps(vp, vi);
      __m128 const step = _mm_div_ps(_mm_mul_ps(alphav, mi), _mm_add_ps(_mm_sqrt_ps(vi), epsv));
      _mm_storeu_ps(wp, _mm_sub_ps(_mm_loadu_ps(wp), step));
    };
    std::size_t i = begin;
    for (; i + 4 <= end; i += 4) block(w + i, g + i, m + i, v + i);
    if (i == end) return;
    // The last one to three elements, through a block of copies padded with ones.
    float tw[4] = {1, 1, 1, 1}, tg[4] = {1, 1, 1, 1}, tm[4] = {1, 1, 1, 1}, tv[4] = {1, 1, 1, 1};
    std::size_t const left = end - i;
    std::copy_n(w + i, left, tw), std::copy_n(g + i, left, tg);
    std::copy_n(m + i, left, tm), std::copy_n(v + i, left, tv);
    block(tw, tg, tm, tv);
    std::copy_n(tw, left, w + i), std::copy_n(tm, left, m + i), std::copy_n(tv, left, v + i);
#else
    for (std::size_t i = begin; i < end; ++i) (*this)(i);
#endif
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

#undef CONVOY_ADAM_SSE
