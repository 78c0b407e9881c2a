// Every concept convoy checks, on one screen: the Model a user writes, and the three policy kinds
// (placement, communication, synchronization) a Strategy is composed of. Atoms are small and named
// so that a compiler note names the missing piece.
#pragma once

#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "batch.hpp"
#include "gradients_ready.hpp"
#include "snapshot.hpp"
#include "variables.hpp"

namespace convoy {

/// Tags a policy opts in with: `using policy_category = placement_tag;`.
struct placement_tag {};
struct communication_tag {};
struct synchronization_tag {};

template <class P, class Tag>
concept policy_of = std::same_as<typename P::policy_category, Tag> && requires {
  { P::name } -> std::convertible_to<std::string_view>;
};

template <class P>
concept placement_policy = policy_of<P, placement_tag>;
template <class P>
concept communication_policy = policy_of<P, communication_tag>;
template <class P>
concept synchronization_policy = policy_of<P, synchronization_tag>;

/// `Variables& variables()`: where the model's weights and gradients live.
template <class M>
concept has_variables = requires(M& m) {
  { m.variables() } -> std::same_as<Variables&>;
};

/// `float forward_backward(convoy::Batch const&)`: returns the batch's mean loss and overwrites
/// every gradient in variables().grads().
template <class M>
concept has_forward_backward = requires(M& m, Batch const& batch) {
  { m.forward_backward(batch) } -> std::convertible_to<float>;
};

/// Optional `convoy::Metrics evaluate(convoy::Batch const&)`: forward only.
template <class M>
concept has_evaluate = requires(M& m, Batch const& batch) {
  { m.evaluate(batch) } -> std::same_as<Metrics>;
};

/// Replicas are copies of the model the user hands to a Strategy.
template <class M>
concept replicable = std::copy_constructible<M>;

/// A type convoy can train. The contract in full, with a worked example: docs/own_model.md and
/// examples/04_own_model.
template <class M>
concept model = has_variables<M> && has_forward_backward<M> && replicable<M>;

/// Optional `float forward_backward(convoy::Batch const&, Context const&)`: a model that computes
/// in the execution context its placement gives (nn::Mlp does); others compute on the host.
template <class M, class Context>
concept computes_in = requires(M& m, Batch const& batch, Context const& ctx) {
  { m.forward_backward(batch, ctx) } -> std::convertible_to<float>;
};

/// Runs `m`'s forward_backward in `ctx` when the model takes a context, else plainly.
template <class M, class Context>
float forward_backward_in(M& m, Batch const& batch, Context const& ctx) {
  if constexpr (computes_in<M, Context>) {
    return static_cast<float>(m.forward_backward(batch, ctx));
  } else {
    return static_cast<float>(m.forward_backward(batch));
  }
}

/// Optional `float forward_backward(convoy::Batch const&, Context const&, convoy::GradientsReady)`:
/// a model that reports, layer by layer during its backward pass, which gradients are final (nn::Mlp
/// does), so that a bucketed exchange overlaps the rest of the pass. Others are exchanged after it.
template <class M, class Context>
concept reports_gradients = requires(M& m, Batch const& batch, Context const& ctx,
                                     GradientsReady ready) {
  { m.forward_backward(batch, ctx, ready) } -> std::convertible_to<float>;
};

/// forward_backward_in, telling `ready` of final gradients when the model reports them; a model
/// that does not leaves every gradient to be taken as final when it returns.
template <class M, class Context>
float forward_backward_reporting(M& m, Batch const& batch, Context const& ctx,
                                 GradientsReady ready) {
  if constexpr (reports_gradients<M, Context>) {
    return static_cast<float>(m.forward_backward(batch, ctx, ready));
  } else {
    return forward_backward_in(m, batch, ctx);
  }
}

/// What a placement gives each replica: `context(r)`, an execution context (exec::Host) that has
/// `enter()`, called on the replica's thread before it computes.
template <class P>
concept gives_contexts = requires(P const& p, std::size_t r) {
  typename P::context_type;
  { p.context(r) } -> std::same_as<typename P::context_type>;
  { p.replica_count() } -> std::convertible_to<int>;
  p.context(r).enter();
};

/// What a synchronization policy gives: its rule object, built from the counters it resumes at,
/// a check of its knobs against the replica count, and a timeout.
template <class S>
concept gives_rules = requires(S const& s, Counters const& c, std::size_t replicas) {
  typename S::rules_type;
  { s.make_rules(c) } -> std::same_as<typename S::rules_type>;
  s.check(replicas);
  { s.continue_after_error() } -> std::same_as<bool>;
  s.timeout;
};

}  // namespace convoy
