// State variables (Variables::add_state): values a model updates itself, such as BatchNorm's
// running statistics. Every engine applies their change instead of the optimizer: one replica
// keeps its own new value, a synchronous step the mean of the replicas' new values, and no
// optimizer slot ever moves for them.
#include <doctest/doctest.h>

#include <cmath>
#include <convoy/strategy.hpp>
#include <cstddef>
#include <vector>

namespace test_strategy_state_variables {

using namespace convoy;

namespace {

// One trained weight `w` (gradient 1 every step) and a two-element running mean of the features:
// new = 0.5 old + 0.5 mean(features), reported as old - new.
struct RunningMean {
  Variables vars;
  VariableId w, running;
  RunningMean() : w(vars.add("w", {1})), running(vars.add_state("running", {2})) {}
  Variables& variables() { return vars; }
  float forward_backward(Batch const& batch) {
    double mean = 0.0;
    for (float x : batch.features) mean += x;
    mean /= static_cast<double>(batch.features.size());
    vars.grad(w)[0] = 1.0f;
    auto const old = vars.value(running);
    for (std::size_t i = 0; i < old.size(); ++i) {
      float const updated = 0.5f * old[i] + 0.5f * static_cast<float>(mean);
      vars.grad(running)[i] = old[i] - updated;
    }
    return 0.0f;
  }
};

// Replica r's batch holds rows of the value r + 1: replica means 1, 2, ...
RunPlan steps(std::int64_t count, std::vector<std::vector<float>> const& rows) {
  RunPlan plan;
  plan.until = count;
  plan.batch = [&rows](std::size_t replica, std::int64_t) {
    return Batch{
        .features = rows[replica], .labels = {}, .targets = {}, .rows = rows[replica].size()};
  };
  return plan;
}

std::vector<std::vector<float>> replica_rows(std::size_t replicas) {
  std::vector<std::vector<float>> rows;
  for (std::size_t r = 0; r < replicas; ++r) rows.emplace_back(4, static_cast<float>(r + 1));
  return rows;
}

}  // namespace

TEST_CASE("the arena ranges of state variables are reported and merged") {
  Variables vars;
  vars.add("a", {3});
  vars.add_state("b", {2});
  vars.add_state("c", {1});
  vars.add("d", {4});
  vars.add_state("e", {2});
  CHECK(vars.state_ranges() == std::vector<ArenaRange>{{3, 6}, {10, 12}});
  CHECK_FALSE(vars.list()[1].trainable);
  CHECK(vars.list()[3].trainable);
}

TEST_CASE("one replica keeps the new value of its state, whatever the optimizer") {
  for (auto const& optimizer :
       {optim::Optimizer{optim::Sgd{.learning_rate = 0.5f}}, optim::Optimizer{optim::Momentum{}},
        optim::Optimizer{optim::Adam{}}}) {
    CAPTURE(optimizer.name());
    Strategy<RunningMean, place::Host, comm::InProcess, sync::Synchronous> strategy{RunningMean{}};
    strategy.set_optimizer(optimizer);
    auto const rows = replica_rows(1);
    strategy.run(steps(3, rows));
    auto const weights = strategy.get_weights();
    // 0 -> 0.5 -> 0.75 -> 0.875 towards the mean 1
    CHECK(weights.at("running").data[0] == doctest::Approx(0.875f).epsilon(1e-6));
    CHECK(weights.at("running").data[1] == doctest::Approx(0.875f).epsilon(1e-6));
    CHECK(weights.at("w").data[0] < 0.0f);  // trained by the optimizer
    for (auto const& [name, slot] : strategy.snapshot().slots) {
      if (name.starts_with("running/")) CHECK(slot.data == std::vector<float>{0.0f, 0.0f});
    }
  }
}

TEST_CASE("a synchronous step leaves the mean of the replicas' new state values") {
  auto const rows = replica_rows(3);
  auto check = [&](auto& strategy) {
    strategy.set_optimizer(optim::Adam{});
    strategy.run(steps(2, rows));
    // Replica means 1, 2, 3: 0 -> 0.5 * 2 = 1 -> 0.5 + 1 = 1.5, the same in every replica.
    CHECK(strategy.get_weights().at("running").data[0] == doctest::Approx(1.5f).epsilon(1e-6));
    auto& group = strategy.engine().state();
    for (std::size_t r = 0; r < group.size(); ++r) {
      auto const& vars = group.replica(r).variables();
      CHECK(vars.value(vars.at("running"))[1] == doctest::Approx(1.5f).epsilon(1e-6));
    }
  };
  SUBCASE("Mirrored") {
    Strategy<RunningMean, place::Mirrored, comm::InProcess, sync::Synchronous> strategy{
        RunningMean{}, {.replicas = 3}};
    check(strategy);
  }
  SUBCASE("CentralStorage") {
    Strategy<RunningMean, place::CentralStorage, comm::InProcess, sync::Synchronous> strategy{
        RunningMean{}, {.replicas = 3}};
    check(strategy);
  }
  SUBCASE("Mirrored, BoundedStaleness<0> through the central store") {
    Strategy<RunningMean, place::Mirrored, comm::InProcess, sync::BoundedStaleness<0>> strategy{
        RunningMean{}, {.replicas = 3}};
    strategy.set_optimizer(optim::Adam{});
    strategy.run(steps(3, rows));
    // Each replica's change applied in turn, none lost: the value stays within the replicas'
    // means and has moved off zero. It reaches 3 exactly when all three replicas compute their
    // first step from the same zero (changes 0.5, 1 and 1.5 applied in turn), as a TSan run did.
    float const value = strategy.get_weights().at("running").data[0];
    CHECK(value > 0.5f);
    CHECK(value <= 3.0f);
  }
}

TEST_CASE("an optimizer update over a range that cuts through state variables") {
  Variables vars;
  vars.add("a", {2});
  vars.add_state("s", {2});
  vars.add("b", {2});
  optim::Optimizer const adam{optim::Adam{.learning_rate = 0.1f}};
  auto state = adam.make_state(vars);
  std::vector<float> weights{1, 1, 1, 1, 1, 1};
  std::vector<float> const grads{1, 1, 0.25f, 0.5f, 1, 1};
  // Elements 1..4 only: a's second, both of s, b's first.
  adam.apply(exec::Host{}, weights, std::span<float const>(grads).subspan(1, 4), state, 1, 2.0f, 1);
  CHECK(weights[0] == 1.0f);
  CHECK(weights[1] < 1.0f);
  CHECK(weights[2] == doctest::Approx(1.0f - 2.0f * 0.25f));
  CHECK(weights[3] == doctest::Approx(1.0f - 2.0f * 0.5f));
  CHECK(weights[4] < 1.0f);
  CHECK(weights[5] == 1.0f);
  CHECK(state.slots[0][2] == 0.0f);
  CHECK(state.slots[1][3] == 0.0f);
  CHECK(state.slots[0][4] != 0.0f);
}

}  // namespace test_strategy_state_variables
