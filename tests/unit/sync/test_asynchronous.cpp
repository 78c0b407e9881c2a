// sync::Asynchronous and sync::BoundedStaleness<S> over comm::InProcess: asynchronous training
// converges and counts a global step per applied gradient; under BoundedStaleness<S> no replica is
// ever more than S clocks ahead of the slowest, which plain asynchronous training does not promise.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <convoy/io/sampler.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <numeric>
#include <feed.hpp>
#include <synthetic.hpp>
#include <thread>
#include <vector>

namespace test_sync_asynchronous {

using namespace convoy;
using testing::Feed;
using testing::plan;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

// Replica 0 is slow: it sleeps inside the function that hands it its batch. While it is in there
// its clock is known exactly (the local step it asked for), so every other replica's lead over it,
// taken when that replica asks for a batch, is measured here, independently of the strategy. The
// slowest replica can only be slower, so this lead never exceeds the true one.
template <class P, class S>
std::int64_t largest_lead(P placement, S sync, std::int64_t steps) {
  using namespace std::chrono_literals;
  Strategy<nn::Mlp, P, comm::InProcess, S> strategy(nn::Mlp({12, 8, 3}), placement, {}, sync);
  Feed const feed(data, 96, strategy.replicas(), 5);
  std::atomic<std::int64_t> slow_clock{-1};  // replica 0's clock while it is inside its batch
  std::atomic<std::int64_t> lead{0};
  std::atomic<bool> slow_started{false};
  strategy.run(plan(steps, [&](std::size_t r, std::int64_t k) {
    if (r == 0) {
      slow_clock = k;
      slow_started = true;
      std::this_thread::sleep_for(3ms);
      auto batch = feed(r, k);
      slow_clock = -1;
      return batch;
    }
    while (!slow_started) std::this_thread::yield();  // no race is won before the slow one starts
    if (auto const slow = slow_clock.load(); slow >= 0) {
      auto seen = lead.load();
      while (k - slow > seen && !lead.compare_exchange_weak(seen, k - slow)) {
      }
    }
    return feed(r, k);
  }));
  CHECK(strategy.global_step() == steps);
  CHECK(strategy.counters().applied == steps);
  CHECK(strategy.counters().batches() == steps);
  return lead;
}

}  // namespace

TEST_CASE("asynchronous training converges and sums the replicas' steps") {
  for (int replicas : {2, 4}) {
    CAPTURE(replicas);
    Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous> strategy(
        nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = replicas});
    strategy.set_optimizer(optim::Sgd{0.1f});
    Feed const feed(data, 96, strategy.replicas(), 5);
    std::vector<float> losses;
    std::vector<std::int64_t> steps_seen;
    strategy.run(plan(400, feed, [&](StepReport const& report) {
      losses.push_back(report.loss);
      steps_seen.push_back(report.global_step);
      return true;
    }));
    CHECK(strategy.global_step() == 400);
    CHECK(strategy.counters().batches() == 400);  // the sum of the replicas' local steps
    std::sort(steps_seen.begin(), steps_seen.end());
    for (std::size_t i = 0; i < steps_seen.size(); ++i) {
      CHECK(steps_seen[i] == static_cast<std::int64_t>(i + 1));  // each global step reported once
    }
    auto mean = [&](std::size_t from, std::size_t to) {
      return std::accumulate(losses.begin() + from, losses.begin() + to, 0.0f) / float(to - from);
    };
    // Against the untrained model's loss: the first reported losses already come from several
    // replicas' updates in an order that varies, so they make a poor reference.
    nn::Mlp untrained({12, 16, 3});
    double const initial = untrained.evaluate(data.slice(0, data.rows())).mean_loss();
    CHECK(mean(380, 400) < 0.4 * initial);
    // The model the strategy hands back classifies well.
    nn::Mlp model = strategy.model();
    Metrics m = model.evaluate(data.slice(0, data.rows()));
    CHECK(m.accuracy() > 0.9);
  }
}

TEST_CASE("BoundedStaleness<S> keeps every replica within S clocks of the slowest") {
  // The bound is reached (so it was the bound that held the fast replicas) and never exceeded.
  CHECK(largest_lead(place::Mirrored{.replicas = 3}, sync::BoundedStaleness<2>{}, 120) == 2);
  CHECK(largest_lead(place::CentralStorage{.replicas = 3}, sync::BoundedStaleness<1>{}, 120) == 1);
  CHECK(largest_lead(place::Mirrored{.replicas = 2}, sync::BoundedStaleness<0>{}, 60) == 0);
}

TEST_CASE("plain asynchronous training lets fast replicas run far ahead") {
  // The same set-up without a bound: the fast replicas overtake the slow one by many clocks, so the
  // check above is not satisfied by accident.
  CHECK(largest_lead(place::Mirrored{.replicas = 3}, sync::Asynchronous{}, 120) > 5);
}

namespace {

thread_local std::int64_t counting_step = 0;  // the local step the replica on this thread computes

// One weight; every gradient is -1, so under SGD with rate 1 each update adds exactly 1 and the
// weight a replica computes on counts the updates it sees.
struct CountingModel {
  Variables vars{"count"};
  VariableId w = vars.add("w", {1});
  std::shared_ptr<std::atomic<int>> too_stale = std::make_shared<std::atomic<int>>(0);
  Variables& variables() { return vars; }
  float forward_backward(Batch const&) {
    // Under BoundedStaleness<0> with 2 replicas, a replica at local step k waits until the other
    // has applied k updates too, so it must see at least 2k.
    if (vars.value(w)[0] < 2.0f * static_cast<float>(counting_step)) ++*too_stale;
    vars.grad(w)[0] = -1.0f;
    return 0.0f;
  }
};

}  // namespace

TEST_CASE("BoundedStaleness<0>: a replica computes on every update its clock entitles it to") {
  using S = Strategy<CountingModel, place::CentralStorage, comm::InProcess,
                     sync::BoundedStaleness<0>>;
  CountingModel model;
  S strategy(model, place::CentralStorage{.replicas = 2});
  strategy.set_optimizer(optim::Sgd{1.0f});
  Feed const feed(data, 96, 2, 5);
  strategy.run(plan(400, [&](std::size_t r, std::int64_t k) {
    counting_step = k;
    return feed(r, k);
  }));
  CHECK(strategy.global_step() == 400);
  CHECK(strategy.weights()[0] == 400.0f);
  CHECK(model.too_stale->load() == 0);
}

}  // namespace test_sync_asynchronous
