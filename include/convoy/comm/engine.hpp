// The engine contract: what a Communication policy's engine gives the Strategy that owns it, the
// required pieces and the optional ones, each a concept with what it is for. strategy.hpp asks an
// engine only through these names; comm/in_process/engine.hpp is the smallest engine that meets
// the contract, comm/buckets/collective_engine.hpp the one a collective fabric plugs into.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/snapshot.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"
#include "../optim/optimizer.hpp"
#include "../train/step.hpp"

namespace convoy {

/// What an engine's state() is (comm::ReplicaGroup, or a cluster's client): the run's state, by
/// name, whatever process holds it.
template <class St>
concept engine_state = requires(St& s, St const& cs, Snapshot const& snapshot, std::span<float> out,
                                optim::Optimizer const& optimizer,
                                std::map<std::string, Tensor> const& named) {
  { cs.snapshot() } -> std::same_as<Snapshot>;  // consistent, even from after_step
  s.restore(snapshot);                          // checks everything first
  cs.read_weights(out);                         // the authoritative weights, flat
  s.set_weights(named);                         // in every replica, checked first
  s.set_optimizer(optimizer);                   // zeroes its slots
  { cs.optimizer() } -> std::convertible_to<optim::Optimizer const&>;
  { cs.counters() } -> std::convertible_to<Counters const&>;
  { cs.layout() } -> std::same_as<Variables const&>;
  { cs.size() } -> std::convertible_to<std::size_t>;  // this process's replicas
  cs.model();                                         // replica 0, between runs
};

/// Required of every engine: run(plan) trains until a goal of the plan (blocking), lock_step()
/// says whether every replica takes every step together (then a callback sees them at rest),
/// state() holds the run's state, and log_placement prints where everything lives.
template <class E>
concept engine = requires(E& e, E const& ce, RunPlan const& plan, std::ostream& out,
                          std::string_view comm_name) {
  e.run(plan);
  { ce.lock_step() } -> std::same_as<bool>;
  requires engine_state<std::remove_cvref_t<decltype(e.state())>>;
  ce.log_placement(out, comm_name);
};

/// Optional `bool chief() const`: a task of a cluster, where only the chief writes what stands
/// for the whole run (checkpoints). Without it the engine's process is its own chief.
template <class E>
concept has_chief = requires(E const& e) {
  { e.chief() } -> std::same_as<bool>;
};

/// Optional `bool serves() const`: whether run() serves other tasks instead of training (a
/// parameter-server task, which runs until every worker is done). Without it, never.
template <class E>
concept may_serve = requires(E const& e) {
  { e.serves() } -> std::same_as<bool>;
};

/// Optional `bool sees_every_update() const`: false where after_step hears only of this task's
/// own updates (a cluster's worker), so periodic actions fire at the first step past a multiple.
/// Without it, every update is heard.
template <class E>
concept may_miss_updates = requires(E const& e) {
  { e.sees_every_update() } -> std::same_as<bool>;
};

/// Optional `state().set_learning_rate(float)`: a learning rate changed between steps, slots
/// kept. Without it Strategy::set_learning_rate refuses: the optimizer runs on other tasks.
template <class E>
concept adjusts_learning_rate = requires(E& e, float rate) {
  e.state().set_learning_rate(rate);
};

/// Optional `std::vector<float> mean_gradients() const`: the last update's gradients, flat in
/// layout order, the mean the optimizer applied; empty where they cannot be had now (replicas
/// computing on). Without it Strategy::get_gradients is empty.
template <class E>
concept gives_mean_gradients = requires(E const& e) {
  { e.mean_gradients() } -> std::same_as<std::vector<float>>;
};

/// Optional `context(std::size_t replica) const`: the execution context replica `replica`
/// computes in (exec::Host, exec::Cuda), for where its batches are gathered. Without it, the
/// host's.
template <class E>
concept gives_replica_contexts = requires(E const& e, std::size_t replica) {
  e.context(replica);
};

/// Optional `state().save_checkpoint(dir, data_seed)`: a state whose parts are written by the
/// tasks that hold them (a cluster's shards) and committed by the chief; returns the checkpoint's
/// path. Without it Strategy writes its snapshot in one file.
template <class E>
concept writes_own_checkpoint = requires(E& e, std::filesystem::path const& dir,
                                         std::uint64_t data_seed) {
  { e.state().save_checkpoint(dir, data_seed) } -> std::same_as<std::filesystem::path>;
};

/// Optional on a Communication policy: `template <class Model, class Placement, class Sync>
/// static constexpr bool pairs_with()`, whose static_asserts say in the policy's own words (its
/// product's: which component to link, which package brings it) why it cannot run a pairing. A
/// Strategy instantiates it; for a policy without it, strategy.hpp's rules speak of what the
/// policy can do (collective, host_collective, serves_shards).
template <class C, class Model, class Placement, class Sync>
concept speaks_for_pairing = requires {
  { C::template pairs_with<Model, Placement, Sync>() } -> std::same_as<bool>;
};

}  // namespace convoy
