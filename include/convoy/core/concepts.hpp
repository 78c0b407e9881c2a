// Every concept convoy checks, on one screen: the Model a user writes, and the three policy kinds
// (placement, communication, synchronization) a Strategy is composed of. Atoms are small and named
// so that a compiler note names the missing piece.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory_resource>
#include <string>
#include <string_view>
#include <type_traits>

#include "batch.hpp"
#include "gradient_places.hpp"
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
/// a model that reports, layer by layer during its backward pass, which gradients are final
/// (nn::Mlp does), so that a bucketed exchange overlaps the rest of the pass. Others are exchanged
/// after it.
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

/// Optional `float forward_backward(convoy::Batch const&, Context const&,
/// convoy::GradientPlaces&)`: a model that may leave a gradient where its framework computed it,
/// saying so in the GradientPlaces (libtorch::Model leaves autograd's tensors), in memory the host
/// reads, for an engine that reads every gradient once (the lock-step sum); it writes the others
/// into variables().grads().
template <class M, class Context>
concept leaves_gradients = requires(M& m, Batch const& batch, Context const& ctx,
                                    GradientPlaces& places) {
  { m.forward_backward(batch, ctx, places) } -> std::convertible_to<float>;
};

/// forward_backward_in, letting the model leave gradients outside the arena when it can; `places`
/// was reset to the arena before the call.
template <class M, class Context>
float forward_backward_leaving(M& m, Batch const& batch, Context const& ctx,
                               GradientPlaces& places) {
  if constexpr (leaves_gradients<M, Context>) {
    return static_cast<float>(m.forward_backward(batch, ctx, places));
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

/// An execution context that may compute on a device (exec::Cuda): `on_device()`, whether it
/// found its device; `synchronize()`, waiting for its kernels; `C::host()`, the same kind of
/// context computing on the host. Contexts without these compute on the host (exec::Host).
template <class C>
concept may_compute_on_device = requires(C const& c) {
  { c.on_device() } -> std::same_as<bool>;
  c.synchronize();
  { C::host() } -> std::same_as<C>;
};

/// Waits for what a device context has queued, so that the host may read what it wrote (a model's
/// gradients, an update's weights); a host context has nothing queued.
template <class Context>
void settle_on_host(Context const& ctx) {
  if constexpr (may_compute_on_device<Context>) {
    if (ctx.on_device()) ctx.synchronize();
  }
}

/// Optional on an execution context: `std::pmr::memory_resource* batch_memory() const`, where its
/// batches are best gathered (page-locked host memory for a device, so the copy is a DMA).
template <class C>
concept has_batch_memory = requires(C const& c) {
  { c.batch_memory() } -> std::convertible_to<std::pmr::memory_resource*>;
};

/// Optional on an execution context: `std::pmr::memory_resource* memory() const`, where a replica's
/// optimizer slots and a model's buffers live (managed memory on a device: the host reads and
/// writes them between steps).
template <class C>
concept has_arena_memory = requires(C const& c) {
  { c.memory() } -> std::convertible_to<std::pmr::memory_resource*>;
};

/// Optional on a model: `static std::string device_refusal()`, why it computes on the host
/// whatever its placement (libtorch::Model). A placement that could put it on a device hears it
/// (host_only_because) and falls back to the host in one line, or refuses under strict placement.
template <class M>
concept computes_on_host_only = requires {
  { M::device_refusal() } -> std::convertible_to<std::string>;
};

/// Why `M` computes on the host in `Context` whatever its placement, or empty: its own
/// device_refusal(), or, for a context that may be a device, a forward_backward that takes no
/// context, which computes on the host and cannot reach arenas in a device's memory.
template <class M, class Context>
std::string host_only_reason() {
  if constexpr (computes_on_host_only<M>) {
    return M::device_refusal();
  } else if constexpr (may_compute_on_device<Context> && !computes_in<M, Context>) {
    return "the model's forward_backward takes no execution context, so it computes on the host "
           "(give it forward_backward(batch, ctx), as nn::Mlp has, to compute on a device)";
  } else {
    return {};
  }
}

/// Optional on a placement that may put replicas on a device: `std::string host_only_because`,
/// set to a model's device_refusal() before it resolves (place::Gpu).
template <class P>
concept hears_host_only_models = requires(P& p) {
  p.host_only_because = std::string();
};

/// Optional on a placement: `resolve()`, which finds its devices (or falls back to the host),
/// once, before the replicas are built.
template <class P>
concept resolves_devices = requires(P& p) {
  p.resolve();
};

/// Optional on a placement: `adopt(variables, r)`, which moves replica r's arenas to its device
/// (exec::Cuda::adopt).
template <class P>
concept adopts_replicas = requires(P& p, Variables& vars, std::size_t r) {
  p.adopt(vars, r);
};

/// Optional on a placement: `std::pmr::memory_resource* central_memory() const`, the memory of its
/// central copy of the weights (place::CentralStorageGpus: page-locked host memory its devices
/// read). Without it the central copy is aligned heap memory.
template <class P>
concept has_central_memory = requires(P const& p) {
  { p.central_memory() } -> std::convertible_to<std::pmr::memory_resource*>;
};

/// Optional on a placement: `bool log_placement`, set to print where everything lives as the
/// strategy is built (TensorFlow's log_device_placement).
template <class P>
concept asks_placement_log = requires(P const& p) {
  { p.log_placement } -> std::convertible_to<bool>;
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
