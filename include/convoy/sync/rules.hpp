// What a synchronization rule object says, and the concept every one satisfies. A rule object
// holds the bookkeeping of one Sync policy (who may start a step, what to do with a gradient that
// arrives) and nothing else: no threads, no locks, no weights. The in-process central store and a
// parameter-server shard drive the same objects, under their own lock.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>

namespace convoy::sync {

/// What to do with a gradient that has arrived.
enum class Admission {
  drop,        ///< late: its step was applied without it; count it and discard it
  apply,       ///< apply it on its own now (asynchronous, bounded staleness)
  accumulate,  ///< add it to the open step's sum; accumulated() says whether the step is complete
};

/// A rule object: the calls an engine makes, in this order for each step of replica r:
/// may_start(r) (wait while false), open_step() (tag the gradient), admit(r, tag) on arrival,
/// accumulated(r) after adding an `accumulate`d gradient (true: apply the sum now), and
/// applied(r) after every update. retire(r) when r stops for good. accumulates(): whether gradients
/// are summed into steps (and may be dropped), or each applied on its own.
template <class R>
concept rules = requires(R& r, R const& c, std::size_t replica, std::int64_t tag) {
  { c.lock_step() } -> std::same_as<bool>;
  { c.may_start(replica) } -> std::same_as<bool>;
  { c.open_step() } -> std::same_as<std::int64_t>;
  { r.admit(replica, tag) } -> std::same_as<Admission>;
  { r.accumulated(replica) } -> std::same_as<bool>;
  r.applied(replica);
  r.retire(replica);
  { c.waiting_for(replica) } -> std::convertible_to<std::string>;
  { c.gradients_per_update() } -> std::same_as<std::size_t>;
  { c.accumulates() } -> std::same_as<bool>;
};

/// Optional `std::int64_t lead(std::size_t replica) const`: rules that bound staleness
/// (sync::ClockTable), promising that a replica at clock c computes on weights holding every
/// update up to clock c - S - 1. Such a replica pulls after its wait at the start of every step,
/// and a lost one keeps its clock, holding the leaders back as a slow one does.
template <class R>
concept bounds_staleness = requires(R const& r, std::size_t replica) {
  { r.lead(replica) } -> std::convertible_to<std::int64_t>;
};

/// Optional `std::size_t discard()`: rules that sum gradients into an open step (sync::Aggregator)
/// throw that step's gradients away at the end of a run and say how many there were.
template <class R>
concept discards_open_step = requires(R& r) {
  { r.discard() } -> std::convertible_to<std::size_t>;
};

/// Optional: rules whose group of replicas changes (sync::Aggregator): `leave(r)` when r is lost
/// for good (true: the open step is complete without it, apply it now; it is a member again from
/// its next gradient), `member(r)`, `contributed(r)`, whether r's gradient is in the open step, and
/// `summed()`, the gradients in it.
template <class R>
concept elastic = requires(R& r, R const& c, std::size_t replica) {
  { r.leave(replica) } -> std::same_as<bool>;
  { c.member(replica) } -> std::same_as<bool>;
  { c.contributed(replica) } -> std::same_as<bool>;
  { c.summed() } -> std::convertible_to<std::size_t>;
};

/// Optional on a Sync policy: `replicas_to_aggregate`, the M of a step that takes the first M
/// gradients (sync::Synchronous; 0: all).
template <class S>
concept takes_first_m = requires(S const& s) {
  { s.replicas_to_aggregate } -> std::convertible_to<std::int64_t>;
};

/// Optional on a Sync policy: a group that goes on when it loses a replica for good
/// (sync::Synchronous): `min_workers`, the fewest it trains with, `stop_on_lost_worker`, the old
/// fail-fast, and `goes_on_with(live)`, whether `live` replicas left train on.
template <class S>
concept survives_losses = requires(S const& s, std::size_t live) {
  { s.min_workers } -> std::convertible_to<std::int64_t>;
  { s.stop_on_lost_worker } -> std::convertible_to<bool>;
  { s.goes_on_with(live) } -> std::same_as<bool>;
};

/// Optional on a Sync policy: `static constexpr staleness`, the S of bounded staleness
/// (sync::BoundedStaleness<S>).
template <class S>
concept has_staleness_bound = requires {
  { S::staleness } -> std::convertible_to<std::int64_t>;
};

}  // namespace convoy::sync
