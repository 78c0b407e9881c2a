// Mlp: a ready-made multi-layer perceptron model (Dense + ReLU layers, softmax cross-entropy on the
// last), satisfying convoy::model. Variables are named "<scope>/layer1/kernel",
// "<scope>/layer1/bias", ...
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory_resource>
#include <string>
#include <vector>

#include "../core/batch.hpp"
#include "../core/error.hpp"
#include "../core/gradients_ready.hpp"
#include "../core/variables.hpp"
#include "../exec/host.hpp"
#include "dense.hpp"
#include "losses.hpp"
#include "relu.hpp"

namespace convoy::nn {

class Mlp {
 public:
  /// `sizes` lists the widths from input to classes, e.g. {784, 500, 10}. Throws Error for fewer
  /// than two sizes.
  explicit Mlp(std::vector<std::size_t> sizes, std::string scope = "mlp",
               std::uint64_t seed = Variables::default_seed)
      : vars_(std::move(scope), seed) {
    if (sizes.size() < 2) throw Error("convoy: an Mlp needs at least an input and an output size");
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l) {
      layers_.emplace_back(vars_, "layer" + std::to_string(l + 1), sizes[l], sizes[l + 1]);
    }
    outputs_.resize(layers_.size());
    deltas_.resize(layers_.size());
  }

  Variables& variables() { return vars_; }
  Variables const& variables() const { return vars_; }

  /// Mean softmax cross-entropy of the batch; overwrites every gradient. Computes in `ctx`, the
  /// context the strategy's placement gives this replica; the one-argument form uses the host.
  /// `ready` hears of each layer's kernel and bias as soon as its backward step has written them
  /// (last layer first), so that a bucketed exchange can start on them.
  template <class Context>
  float forward_backward(Batch const& host_batch, Context const& ctx, GradientsReady ready = {}) {
    Batch const& batch = forward(host_batch, ctx);
    std::size_t const last = layers_.size() - 1;
    deltas_[last].resize(outputs_[last].size());
    float const loss = softmax_cross_entropy(ctx, outputs_[last], batch.labels, batch.rows,
                                             layers_[last].outputs(), deltas_[last]);
    for (std::size_t l = last + 1; l-- > 0;) {
      std::span<float> dx;
      if (l > 0) {
        deltas_[l - 1].resize(outputs_[l - 1].size());
        dx = deltas_[l - 1];
      }
      layers_[l].backward(ctx, vars_, input_of(l, batch), deltas_[l], batch.rows, dx);
      ready(layers_[l].kernel(), layers_[l].bias());
      if (l > 0) relu_backward(ctx, outputs_[l - 1], deltas_[l - 1]);
    }
    return loss;
  }

  float forward_backward(Batch const& batch) { return forward_backward(batch, exec::Host{}); }

  /// Loss sum and correct predictions over the batch; touches no gradient.
  template <class Context>
  Metrics evaluate(Batch const& host_batch, Context const& ctx) {
    Batch const& batch = forward(host_batch, ctx);
    return softmax_cross_entropy_metrics(ctx, outputs_.back(), batch.labels, batch.rows,
                                         layers_.back().outputs());
  }

  Metrics evaluate(Batch const& batch) { return evaluate(batch, exec::Host{}); }

  std::vector<Dense> const& layers() const { return layers_; }

 private:
  // Checks the batch on the host, stages it where `ctx` computes and runs every layer; returns the
  // staged batch.
  template <class Context>
  Batch const& forward(Batch const& batch, Context const& ctx) {
    if (batch.features.size() != batch.rows * layers_.front().inputs()) {
      throw ShapeError(
          "convoy: Mlp '" + vars_.scope() + "' takes " + std::to_string(layers_.front().inputs()) +
          " features per example; the batch has " + std::to_string(batch.features.size()) +
          " values for " + std::to_string(batch.rows) + " rows (" +
          std::to_string(batch.rows ? batch.features.size() / batch.rows : 0) + " per row)");
    }
    if (batch.labels.size() != batch.rows) {
      throw ShapeError("convoy: Mlp '" + vars_.scope() +
                       "' needs one label per row; the batch has " +
                       std::to_string(batch.labels.size()) + " labels for " +
                       std::to_string(batch.rows) + " rows");
    }
    auto const classes = static_cast<std::int32_t>(layers_.back().outputs());
    for (std::int32_t label : batch.labels) {
      if (label < 0 || label >= classes) {
        throw ShapeError("convoy: label " + std::to_string(label) + " is outside the " +
                         std::to_string(classes) + " classes of Mlp '" + vars_.scope() + "'");
      }
    }
    use_memory(ctx.memory());
    Batch const& staged = ctx.stage(batch);
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      outputs_[l].resize(batch.rows * layers_[l].outputs());
      layers_[l].forward(ctx, vars_, input_of(l, staged), batch.rows, outputs_[l]);
      if (l + 1 < layers_.size()) relu_forward(ctx, outputs_[l]);
    }
    return staged;
  }
  // Makes the activation buffers allocate from `memory` (the context's: host or device memory).
  // A copied Mlp's buffers use the default resource, so the first buffer says which is in use.
  void use_memory(std::pmr::memory_resource* memory) {
    if (outputs_.front().get_allocator().resource() == memory) return;
    std::size_t const count = layers_.size();
    outputs_.clear();
    deltas_.clear();
    for (std::size_t l = 0; l < count; ++l) {
      outputs_.emplace_back(memory);
      deltas_.emplace_back(memory);
    }
  }
  std::span<float const> input_of(std::size_t layer, Batch const& batch) const {
    return layer == 0 ? batch.features : std::span<float const>(outputs_[layer - 1]);
  }

  Variables vars_;
  std::vector<Dense> layers_;
  // Activations after ReLU (logits for the last layer), and the gradients with respect to each
  // layer's output, in the memory of the context that last computed.
  std::vector<std::pmr::vector<float>> outputs_;
  std::vector<std::pmr::vector<float>> deltas_;
};

}  // namespace convoy::nn
