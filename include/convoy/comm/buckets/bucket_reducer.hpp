// BucketReducer: one replica's side of a bucketed gradient exchange. The model reports final
// gradients during its backward pass (GradientsReady); as soon as every variable of the next
// bucket is final, the reducer hands that bucket to the exchange, which reduces it among the
// replicas while the backward pass goes on. Buckets start in plan order on every replica, as a
// collective needs. Generic over the exchange: NCCL's allreduce on a communication stream
// (comm/nccl/), or the in-process replica threads' reduction (comm/in_process/bucket_exchange.hpp).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/gradients_ready.hpp"
#include "bucket_plan.hpp"

namespace convoy::comm {

/// An exchange reduces spans of a replica's gradient arena among all replicas (each span becomes
/// the sum over the replicas). start(bucket, grads) begins one and returns without waiting for the
/// others; wait() blocks until every reduction this replica started has finished, or throws.
template <class E>
concept bucket_exchange = requires(E& e, std::size_t bucket, std::span<float> grads) {
  e.start(bucket, grads);
  e.wait();
};

/// Not thread-safe: one replica's thread drives it (the model's backward pass calls it).
template <bucket_exchange Exchange>
class BucketReducer {
 public:
  /// `plan` and `exchange` must outlive the reducer; `grads` is this replica's gradient arena,
  /// laid out as the plan's variables.
  BucketReducer(BucketPlan const& plan, std::span<float> grads, Exchange& exchange)
      : plan_(&plan), grads_(grads), exchange_(&exchange), pending_(plan.size()) {
    std::size_t variables = 0;
    for (auto const& b : plan.buckets()) variables += b.last_variable - b.first_variable + 1;
    final_.resize(variables);
    begin_step();
  }

  /// Every gradient is pending again: called before each forward_backward.
  void begin_step() {
    final_.assign(final_.size(), false);
    for (std::size_t b = 0; b < plan_->size(); ++b) {
      pending_[b] = (*plan_)[b].last_variable - (*plan_)[b].first_variable + 1;
    }
    next_ = 0;
  }

  /// Marks variables [first, last] final and starts every bucket, in plan order, whose variables
  /// are all final. A variable reported twice counts once. Throws Error for a range outside the
  /// plan's variables.
  void ready(VariableId first, VariableId last) {
    if (first.index > last.index || last.index >= final_.size()) {
      throw Error("convoy: a model reported gradients [" + std::to_string(first.index) + ", " +
                  std::to_string(last.index) + "] ready, outside its " +
                  std::to_string(final_.size()) + " variables");
    }
    for (std::size_t v = first.index; v <= last.index; ++v) {
      if (final_[v]) continue;
      final_[v] = true;
      --pending_[plan_->bucket_of(v)];
    }
    start_ready();
  }
  void operator()(VariableId first, VariableId last) { ready(first, last); }

  /// What the model's forward_backward is handed: calls ready().
  GradientsReady hook() { return GradientsReady(*this); }

  /// After forward_backward: takes every gradient as final (a model that does not report gets its
  /// whole exchange here), starts the buckets left and waits for all of them. Throws what the
  /// exchange's wait() throws.
  void finish() {
    if (!final_.empty()) ready(VariableId{0}, VariableId{final_.size() - 1});
    exchange_->wait();
  }

  /// Buckets started in this step.
  std::size_t started() const { return next_; }

 private:
  void start_ready() {
    while (next_ < plan_->size() && pending_[next_] == 0) {
      auto const& b = (*plan_)[next_];
      exchange_->start(next_, grads_.subspan(b.offset, b.size));
      ++next_;
    }
  }

  BucketPlan const* plan_;
  std::span<float> grads_;
  Exchange* exchange_;
  std::vector<std::size_t> pending_;  // per bucket: variables not yet final
  std::vector<bool> final_;           // per variable
  std::size_t next_ = 0;              // the next bucket to start
};

}  // namespace convoy::comm
