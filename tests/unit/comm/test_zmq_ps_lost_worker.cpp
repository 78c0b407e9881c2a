// What a parameter-server shard does with a worker it lost, under each Sync policy and its knobs
// (comm/zmq_ps/lost_worker.hpp): no sockets, the rule alone.
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps/lost_worker.hpp>
#include <convoy/sync/asynchronous.hpp>
#include <convoy/sync/bounded_staleness.hpp>
#include <convoy/sync/synchronous.hpp>

namespace test_comm_zmq_ps_lost_worker {

using namespace convoy;
using comm::zmq_ps::on_loss;
using comm::zmq_ps::OnLoss;

namespace {
Counters counters(std::size_t workers) {
  return Counters{.global_step = 0,
                  .applied = 0,
                  .dropped = 0,
                  .local_steps = std::vector<std::int64_t>(workers, 0)};
}
}  // namespace

TEST_CASE("synchronous: a lost worker leaves the group while min_workers are left") {
  sync::Synchronous const every{};
  auto const rules = every.make_rules(counters(3));
  CHECK(on_loss(rules, every, 3, 2, 0) == OnLoss::depart);
  CHECK(on_loss(rules, every, 3, 1, 0) == OnLoss::depart);
  CHECK(on_loss(rules, every, 3, 0, 0) == OnLoss::fail);    // nobody left, nobody finished
  CHECK(on_loss(rules, every, 3, 0, 2) == OnLoss::depart);  // the others are done: run over
  sync::Synchronous const two{.min_workers = 2};
  CHECK(on_loss(rules, two, 3, 2, 0) == OnLoss::depart);
  CHECK(on_loss(rules, two, 3, 1, 0) == OnLoss::fail);
  sync::Synchronous const stop{.stop_on_lost_worker = true};
  CHECK(on_loss(rules, stop, 3, 2, 0) == OnLoss::fail);
}

TEST_CASE(
    "synchronous with backups: they absorb losses while M are left, never below min_workers") {
  sync::Synchronous const backups{.replicas_to_aggregate = 2, .min_workers = 3};
  auto const rules = backups.make_rules(counters(4));
  CHECK(on_loss(rules, backups, 4, 3, 0) == OnLoss::depart);
  CHECK(on_loss(rules, backups, 4, 2, 0) == OnLoss::fail);  // 2 >= M, but below min_workers
  sync::Synchronous const stop{.replicas_to_aggregate = 2, .stop_on_lost_worker = true};
  CHECK(on_loss(rules, stop, 4, 2, 0) == OnLoss::depart);  // backups as before
  CHECK(on_loss(rules, stop, 4, 1, 0) == OnLoss::fail);    // fewer than M: stop
  sync::Synchronous const shrink{.replicas_to_aggregate = 2};
  CHECK(on_loss(rules, shrink, 4, 1, 0) == OnLoss::depart);  // fewer than M: the group shrinks
}

TEST_CASE("asynchronous and bounded staleness keep their rules") {
  sync::Asynchronous const async{};
  CHECK(on_loss(async.make_rules(counters(2)), async, 2, 0, 0) == OnLoss::depart);
  sync::BoundedStaleness<1> const ssp{};
  CHECK(on_loss(ssp.make_rules(counters(2)), ssp, 2, 1, 0) == OnLoss::wait);
}

}  // namespace test_comm_zmq_ps_lost_worker
