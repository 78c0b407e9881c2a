// Dense: a fully connected layer y = x W + b. It holds only the ids of its two variables, so a
// model made of Dense layers can be copied into replicas freely; every call names the Variables it
// reads.
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include "../core/host_device.hpp"
#include "../core/variables.hpp"
#include "../math/host.hpp"

namespace convoy::nn {

namespace detail {
/// out[i] = b[i % n]: the bias repeated on every row (a named kernel, so that a build with
/// convoy::cuda compiles its device code once: math/cuda_compiled.hpp).
struct BroadcastRows {
  using compiled_kernel = void;
  float* out;
  float const* b;
  std::size_t n;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { out[i] = b[i % n]; }
};
}  // namespace detail

class Dense {
 public:
  /// Adds `<name>/kernel` {inputs, outputs} (Glorot-uniform, drawn from vars.rng()) and
  /// `<name>/bias` {outputs} (zeros). Throws NameError when either name exists.
  Dense(Variables& vars, std::string_view name, std::size_t inputs, std::size_t outputs)
      : kernel_(vars.add(std::string(name) + "/kernel", {inputs, outputs})),
        bias_(vars.add(std::string(name) + "/bias", {outputs})),
        inputs_(inputs),
        outputs_(outputs) {
    float const limit = std::sqrt(6.0f / static_cast<float>(inputs + outputs));
    std::uniform_real_distribution<float> uniform(-limit, limit);
    for (float& w : vars.value(kernel_)) w = uniform(vars.rng());
  }

  /// y (rows x outputs) = x (rows x inputs) W + b, computed in `ctx`.
  template <class Context>
  void forward(Context const& ctx, Variables const& vars, std::span<float const> x,
               std::size_t rows, std::span<float> y) const {
    float* out = y.data();
    std::size_t const n = outputs_;
    math::for_each_index(ctx, rows * n, detail::BroadcastRows{out, vars.value(bias_).data(), n});
    math::gemm(ctx, false, false, rows, n, inputs_, 1.0f, x.data(), vars.value(kernel_).data(),
               1.0f, out);
  }

  /// Overwrites dW = x^T dy and db = column sums of dy; writes dx = dy W^T when dx is non-empty.
  template <class Context>
  void backward(Context const& ctx, Variables& vars, std::span<float const> x,
                std::span<float const> dy, std::size_t rows, std::span<float> dx) const {
    math::gemm(ctx, true, false, inputs_, outputs_, rows, 1.0f, x.data(), dy.data(), 0.0f,
               vars.grad(kernel_).data());
    math::column_sums(ctx, rows, outputs_, dy.data(), vars.grad(bias_).data());
    if (!dx.empty()) {
      math::gemm(ctx, false, true, rows, inputs_, outputs_, 1.0f, dy.data(),
                 vars.value(kernel_).data(), 0.0f, dx.data());
    }
  }

  VariableId kernel() const { return kernel_; }
  VariableId bias() const { return bias_; }
  std::size_t inputs() const { return inputs_; }
  std::size_t outputs() const { return outputs_; }

 private:
  VariableId kernel_, bias_;
  std::size_t inputs_, outputs_;
};

}  // namespace convoy::nn
