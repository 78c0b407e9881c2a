// The rule objects of the three Sync policies, alone: scripted arrival orders, no threads. These
// are the objects the in-process central store drives now and a parameter-server shard drives next.
#include <doctest/doctest.h>

#include <convoy/sync/aggregator.hpp>
#include <convoy/sync/apply_at_once.hpp>
#include <convoy/sync/clock_table.hpp>
#include <convoy/sync/synchronous.hpp>

namespace test_sync_rules {

using namespace convoy;
using sync::Admission;

TEST_CASE("Aggregator: M of N, in arrival order; late and surplus gradients are dropped") {
  sync::Aggregator agg(3, 2);  // 2 of 3
  CHECK_FALSE(agg.lock_step());
  CHECK(agg.open_step() == 0);
  // Step 0: replica 2 arrives first, then 0; 1 comes last and is late.
  CHECK(agg.admit(2, 0) == Admission::accumulate);
  CHECK(agg.may_start(1));
  CHECK(agg.admit(0, 0) == Admission::accumulate);
  CHECK_FALSE(agg.may_start(1));              // step 0 is full: computing for it now is in vain
  CHECK(agg.admit(1, 0) == Admission::drop);  // the step has its two gradients reserved
  CHECK_FALSE(agg.accumulated(2));            // one of two summed
  CHECK(agg.accumulated(0));                  // the second completes the step
  agg.applied(0);
  CHECK(agg.open_step() == 1);
  CHECK(agg.may_start(1));
  // A gradient computed for step 0 that arrives after it was applied is stale.
  CHECK(agg.admit(1, 0) == Admission::drop);
  // Step 1: a replica cannot contribute twice to one step.
  CHECK(agg.admit(1, 1) == Admission::accumulate);
  CHECK(agg.admit(1, 1) == Admission::drop);
  CHECK(agg.waiting_for(0).find("replica(s) 0, 2 have not delivered") != std::string::npos);
  CHECK(agg.admit(0, 1) == Admission::accumulate);
  CHECK_FALSE(agg.accumulated(1));
  CHECK(agg.accumulated(0));
  agg.applied(0);
  CHECK(agg.open_step() == 2);
  CHECK(agg.gradients_per_update() == 2);
  CHECK(agg.accumulates());
}

TEST_CASE("Aggregator: 1 of N takes the first gradient of each step and drops the rest") {
  sync::Aggregator one(2, 1);
  CHECK(one.admit(1, 0) == Admission::accumulate);
  CHECK(one.admit(0, 0) == Admission::drop);
  CHECK(one.accumulated(1));
  one.applied(1);
  CHECK(one.admit(0, 0) == Admission::drop);  // stale
  CHECK(one.admit(0, 1) == Admission::accumulate);
}

TEST_CASE("Aggregator: all of N is lock step; a run that ends mid-step discards the open sum") {
  sync::Aggregator all(2, 2, 7);  // resumed at global step 7
  CHECK(all.lock_step());
  CHECK(all.open_step() == 7);
  CHECK(all.admit(1, 7) == Admission::accumulate);
  CHECK_FALSE(all.accumulated(1));
  CHECK(all.discard() == 1);  // its one gradient is dropped; the step stays open
  CHECK(all.open_step() == 7);
  CHECK(all.admit(1, 7) == Admission::accumulate);
}

TEST_CASE("Aggregator: a lost member shrinks the steps; its gradient in the open step counts") {
  sync::Aggregator all(3, 3);  // lock step over 3
  // Replica 2 gave its gradient for step 0, then is lost: the step still takes it, and 0 and 1.
  CHECK(all.admit(2, 0) == Admission::accumulate);
  CHECK_FALSE(all.accumulated(2));
  CHECK_FALSE(all.leave(2));
  CHECK_FALSE(all.member(2));
  CHECK(all.gradients_per_update() == 3);
  CHECK(all.admit(0, 0) == Admission::accumulate);
  CHECK_FALSE(all.accumulated(0));
  CHECK(all.admit(1, 0) == Admission::accumulate);
  CHECK(all.accumulated(1));
  all.applied(1);
  // From step 1 on, two gradients a step.
  CHECK(all.gradients_per_update() == 2);
  CHECK(all.admit(0, 1) == Admission::accumulate);
  CHECK_FALSE(all.accumulated(0));
  // Replica 1 is lost while 0 waits: the step is complete without it.
  CHECK(all.leave(1));
  CHECK(all.gradients_per_update() == 1);
  CHECK(all.waiting_for(0).find("has 1 of 1 gradients") != std::string::npos);
  all.applied(0);
  // Replica 2 comes back late (its gradient for step 0): dropped, and step 2 waits for it.
  CHECK(all.admit(2, 0) == Admission::drop);
  CHECK(all.member(2));
  CHECK(all.gradients_per_update() == 2);
  CHECK(all.admit(0, 2) == Admission::accumulate);
  CHECK_FALSE(all.accumulated(0));
  CHECK(all.admit(2, 2) == Admission::accumulate);
  CHECK(all.accumulated(2));
  all.applied(2);
  // Every member lost: nothing is complete, nothing is asked for.
  CHECK_FALSE(all.leave(0));
  CHECK_FALSE(all.leave(2));
  CHECK(all.gradients_per_update() == 0);
}

TEST_CASE("Aggregator: with backup replicas a loss changes nothing while M members are left") {
  sync::Aggregator two_of_three(3, 2);
  CHECK_FALSE(two_of_three.leave(2));
  CHECK(two_of_three.gradients_per_update() == 2);
  CHECK_FALSE(two_of_three.leave(1));
  CHECK(two_of_three.gradients_per_update() == 1);
  CHECK(two_of_three.admit(0, 0) == Admission::accumulate);
  CHECK(two_of_three.accumulated(0));
}

TEST_CASE("Synchronous: min_workers must be in 1..replicas") {
  CHECK_NOTHROW(sync::Synchronous{.min_workers = 4}.check(4));
  CHECK_THROWS_WITH_AS(sync::Synchronous{.min_workers = 5}.check(4),
                       doctest::Contains("min_workers is 5 but there are 4 replicas"), Error);
  CHECK_THROWS_AS(sync::Synchronous{.min_workers = 0}.check(4), Error);
  CHECK(sync::Synchronous{.min_workers = 2}.goes_on_with(2));
  CHECK_FALSE(sync::Synchronous{.min_workers = 2}.goes_on_with(1));
  CHECK_FALSE(sync::Synchronous{.stop_on_lost_worker = true}.goes_on_with(3));
}

TEST_CASE("Synchronous builds its aggregator from the counters it resumes at") {
  Counters c{.global_step = 12, .applied = 0, .dropped = 0, .local_steps = {0, 0, 0, 0}};
  auto const agg = sync::Synchronous{.replicas_to_aggregate = 3}.make_rules(c);
  CHECK(agg.open_step() == 12);
  CHECK(agg.gradients_per_update() == 3);
  CHECK(sync::Synchronous{}.make_rules(c).lock_step());
  CHECK_THROWS_AS(sync::Synchronous{.replicas_to_aggregate = 5}.check(4), Error);
  CHECK_THROWS_AS(sync::Synchronous{.replicas_to_aggregate = -1}.check(4), Error);
}

TEST_CASE("ClockTable: a replica waits while it is more than S clocks ahead of the slowest") {
  sync::ClockTable clocks(3, 1);  // S = 1
  // Replica 0 runs ahead alone.
  CHECK(clocks.may_start(0));
  clocks.applied(0);  // clocks 1 0 0
  CHECK(clocks.lead(0) == 1);
  CHECK(clocks.may_start(0));  // lead 1 <= S
  clocks.applied(0);           // clocks 2 0 0
  CHECK_FALSE(clocks.may_start(0));
  CHECK(clocks.waiting_for(0).find("replica 1 (clock 0") != std::string::npos);
  clocks.applied(1);  // clocks 2 1 0: replica 2 is now the slowest
  CHECK_FALSE(clocks.may_start(0));
  CHECK(clocks.slowest() == 2);
  clocks.applied(2);  // clocks 2 1 1
  CHECK(clocks.may_start(0));
  CHECK(clocks.may_start(1));
  // A replica that stops holds nobody back.
  clocks.retire(1);
  clocks.retire(2);
  CHECK(clocks.lead(0) == 0);
  CHECK(clocks.may_start(0));
  CHECK(clocks.admit(0, 0) == Admission::apply);
}

TEST_CASE("ClockTable resumes from each replica's clock; S = 0 is lock step in effect") {
  sync::ClockTable clocks(std::vector<std::int64_t>{5, 4}, 0);
  CHECK_FALSE(clocks.may_start(0));
  CHECK(clocks.may_start(1));
  clocks.applied(1);
  CHECK(clocks.may_start(0));
  CHECK(clocks.may_start(1));
}

TEST_CASE("ApplyAtOnce: every gradient is applied at once, nobody waits") {
  sync::ApplyAtOnce rule(4);
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(rule.may_start(r));
    CHECK(rule.admit(r, 123) == Admission::apply);
  }
  CHECK_FALSE(rule.lock_step());
  CHECK_FALSE(rule.accumulates());
  CHECK(rule.gradients_per_update() == 1);
}

}  // namespace test_sync_rules
