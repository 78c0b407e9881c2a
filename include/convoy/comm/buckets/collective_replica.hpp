// CollectiveReplica: one replica's training step when replicas exchange through a collective (an
// allreduce among equals, no central copy): what comm::Nccl's engine runs on each rank, generic
// over the exchange so that the in-process exchange runs the same code on the host. Under
// sync::Synchronous each step reduces the gradients in buckets during the backward pass, then
// applies the mean; under sync::BoundedStaleness<S> each replica steps alone and every S+1 local
// steps the weights are averaged (periodic model averaging, the Ray weight-averaging pattern).
// sync::Asynchronous has no collective form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"
#include "../../core/host_device.hpp"
#include "../../math/host.hpp"
#include "../../optim/optimizer.hpp"
#include "../../sync/bounded_staleness.hpp"
#include "../../sync/synchronous.hpp"
#include "bucket_plan.hpp"
#include "bucket_reducer.hpp"

namespace convoy::comm {

/// What a collective exchanges under a Sync policy; no specialization: no collective form.
template <class Sync>
struct collective_schedule;
template <>
struct collective_schedule<sync::Synchronous> {
  static constexpr bool averages_weights = false;  ///< bucketed gradients every step
  static constexpr std::int64_t period = 1;
};
template <int S>
struct collective_schedule<sync::BoundedStaleness<S>> {
  static constexpr bool averages_weights = true;  ///< local steps, then the mean of the weights
  static constexpr std::int64_t period = S + 1;
};
namespace detail {
// Named kernels, so that a build with convoy::cuda compiles their device code once
// (math/cuda_compiled.hpp).
struct ScaleBy {
  using compiled_kernel = void;
  float* p;
  float s;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { p[i] *= s; }
};
struct FillZero {
  using compiled_kernel = void;
  float* p;
  CONVOY_HOST_DEVICE void operator()(std::size_t i) const { p[i] = 0.0f; }
};
template <class Context>
void scale(Context const& ctx, std::span<float> x, float s) {
  math::for_each_index(ctx, x.size(), ScaleBy{x.data(), s});
}
template <class Context>
void fill_zero(Context const& ctx, std::span<float> x) {
  math::for_each_index(ctx, x.size(), FillZero{x.data()});
}
}  // namespace detail

/// A Sync policy a collective can run.
template <class Sync>
concept collective_sync = requires {
  collective_schedule<Sync>::period;
};

/// One replica of a collective run. Holds references to the model, plan, exchange and optimizer
/// slots, which must outlive it. Driven by the replica's thread.
template <class Model, class Context, bucket_exchange Exchange, collective_sync Sync>
class CollectiveReplica {
  using schedule = collective_schedule<Sync>;

 public:
  /// `world_size`: the replicas the exchange reduces over. `optimizer`: the group's, read at each
  /// step, so that a learning rate changed between steps (a schedule's callback, which runs with
  /// every replica at rest) takes effect. `slots`: this replica's optimizer state
  /// (under Synchronous every replica's is the same, so the engine gives replica 0 the one it
  /// saves); its update count numbers the steps, so a later run goes on where this one stopped.
  CollectiveReplica(Model& model, Context ctx, BucketPlan const& plan, Exchange& exchange,
                    std::size_t world_size, optim::Optimizer const& optimizer,
                    optim::OptimizerState& slots)
      : model_(&model),
        ctx_(ctx),
        exchange_(&exchange),
        reducer_(plan, model.variables().grads(), exchange),
        scale_(1.0f / static_cast<float>(world_size)),
        optimizer_(&optimizer),
        slots_(&slots) {}

  /// One local step on `batch`; returns its loss. Blocks while the exchange does; throws what the
  /// model, the optimizer or the exchange throw (a timeout names who did not answer).
  float step(Batch const& batch) {
    auto& vars = model_->variables();
    float loss = 0.0f;
    std::int64_t const update = slots_->updates + 1;
    if constexpr (schedule::averages_weights) {
      loss = forward_backward_in(*model_, batch, ctx_);
      optimizer_->apply(ctx_, vars.weights(), vars.grads(), *slots_, 0, 1.0f, update);
      if (update % schedule::period == 0) average_weights();
    } else {
      reducer_.begin_step();
      loss = forward_backward_reporting(*model_, batch, ctx_, reducer_.hook());
      reducer_.finish();
      optimizer_->apply(ctx_, vars.weights(), vars.grads(), *slots_, 0, scale_, update);
    }
    slots_->updates = update;
    return loss;
  }

 private:
  // Weights summed through the exchange in one piece (bucket 0), then scaled. Optimizer slots stay
  // each replica's own.
  void average_weights() {
    auto const weights = model_->variables().weights();
    exchange_->start(0, weights);
    exchange_->wait();
    detail::scale(ctx_, weights, scale_);
    settle_on_host(ctx_);  // the host reads the weights between steps (Strategy::weights)
  }

  Model* model_;
  Context ctx_;
  Exchange* exchange_;
  BucketReducer<Exchange> reducer_;
  float scale_;
  optim::Optimizer const* optimizer_;
  optim::OptimizerState* slots_;
};

}  // namespace convoy::comm
