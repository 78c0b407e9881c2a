// sync::Asynchronous and sync::BoundedStaleness<S> over comm::InProcess: asynchronous training
// converges and counts a global step per applied gradient; under BoundedStaleness<S> no replica is
// ever more than S clocks ahead of the slowest, which plain asynchronous training does not promise.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <convoy/io/sampler.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <numeric>
#include <synthetic.hpp>
#include <thread>
#include <vector>

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

// Replica 0 is slow; returns the largest lead any replica had over the slowest when it started a
// step, counted independently of the strategy from the reports.
template <class P, class S>
std::int64_t largest_lead(P placement, S sync, std::int64_t steps,
                          std::int64_t* reported_lead = nullptr) {
  using namespace std::chrono_literals;
  Strategy<nn::Mlp, P, comm::InProcess, S> strategy(nn::Mlp({12, 8, 3}), placement, {}, sync);
  io::Sampler const sampler(data.rows(), 96, strategy.replicas(), 5);
  std::vector<io::BatchBuffer> buffers(strategy.replicas());
  std::vector<std::int64_t> completed(strategy.replicas(), 0);
  std::int64_t lead = 0, reported = 0;
  strategy.run({steps,
                [&](std::size_t r, std::int64_t k) {
                  if (r == 0) std::this_thread::sleep_for(3ms);
                  return sampler.fill(data, r, k, buffers[r]);
                },
                [&](StepReport const& report) {
                  ++completed[report.replica];
                  // It started this step with completed - 1 clocks; the slowest had at most today's
                  // minimum.
                  auto const slowest = *std::min_element(completed.begin(), completed.end());
                  lead = std::max(lead, completed[report.replica] - 1 - slowest);
                  reported = std::max(reported, report.lead);
                  return true;
                }});
  CHECK(strategy.global_step() == steps);
  CHECK(std::accumulate(strategy.replica_steps().begin(), strategy.replica_steps().end(),
                        std::int64_t{0}) == steps);
  if (reported_lead) *reported_lead = reported;
  return lead;
}

}  // namespace

TEST_CASE("asynchronous training converges and sums the replicas' steps") {
  for (int replicas : {2, 4}) {
    CAPTURE(replicas);
    Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous> strategy(
        nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = replicas});
    strategy.set_optimizer(optim::Sgd{0.1f});
    io::Sampler const sampler(data.rows(), 96, strategy.replicas(), 5);
    std::vector<io::BatchBuffer> buffers(strategy.replicas());
    std::vector<float> losses;
    strategy.run(
        {400, [&](std::size_t r, std::int64_t k) { return sampler.fill(data, r, k, buffers[r]); },
         [&](StepReport const& report) {
           losses.push_back(report.loss);
           CHECK(report.global_step == static_cast<std::int64_t>(losses.size()));
           return true;
         }});
    CHECK(strategy.global_step() == 400);
    auto const& steps = strategy.replica_steps();
    CHECK(std::accumulate(steps.begin(), steps.end(), std::int64_t{0}) == 400);
    auto mean = [&](std::size_t from, std::size_t to) {
      return std::accumulate(losses.begin() + from, losses.begin() + to, 0.0f) / float(to - from);
    };
    CHECK(mean(380, 400) < 0.3f * mean(0, 20));
    // The model the strategy hands back classifies well.
    Metrics m = strategy.model().evaluate(data.slice(0, data.rows()));
    CHECK(m.accuracy() > 0.9);
  }
}

TEST_CASE("BoundedStaleness<S> keeps every replica within S clocks of the slowest") {
  std::int64_t reported = -1;
  CHECK(largest_lead(place::Mirrored{.replicas = 3}, sync::BoundedStaleness<2>{}, 120, &reported) <=
        2);
  CHECK(reported == 2);  // the bound was reached, so it was the bound that held the fast replicas
  CHECK(largest_lead(place::CentralStorage{.replicas = 3}, sync::BoundedStaleness<1>{}, 120,
                     &reported) <= 1);
  CHECK(reported == 1);
  CHECK(largest_lead(place::Mirrored{.replicas = 2}, sync::BoundedStaleness<0>{}, 60, &reported) ==
        0);
}

TEST_CASE("plain asynchronous training lets fast replicas run far ahead") {
  // The same set-up without a bound: the fast replicas overtake the slow one by many clocks, so the
  // check above is not satisfied by accident.
  CHECK(largest_lead(place::Mirrored{.replicas = 3}, sync::Asynchronous{}, 120) > 5);
}
