// Strategy's own contracts: checks made before a run starts (so a bad state cannot hang the
// threads), model() refused during a run, replicas with their own generator streams, snapshots of
// another replica count, and writes into the weights that reach every replica or change nothing.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/io/sampler.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <algorithm>
#include <feed.hpp>
#include <iterator>
#include <synthetic.hpp>

namespace test_strategy_strategy {

using namespace convoy;
using testing::Feed;
using testing::plan;

namespace {

io::Dataset const data = testing::synthetic_classes(480, 6, 3);

using MirroredSync = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
using MirroredAsync = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous>;
using CentralAsync = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;

// A model with a const member: replicas must be built without assigning to it.
struct ConstMemberModel {
  nn::Mlp mlp{{6, 4, 3}};
  std::size_t const classes = 3;
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& b) { return mlp.forward_backward(b); }
};

// Every replica's weights, and the central copy when there is one, all equal `expected`.
template <class S>
bool everywhere(S& strategy, std::vector<float> const& expected) {
  auto& group = strategy.engine().state();
  bool same = std::ranges::equal(strategy.weights(), expected);
  for (std::size_t r = 0; r < group.size(); ++r) {
    same = same && std::ranges::equal(group.replica(r).variables().weights(), expected);
  }
  if (group.has_central()) same = same && std::ranges::equal(group.central(), expected);
  return same;
}

}  // namespace

TEST_CASE("an optimizer state that does not fit is refused before any thread starts") {
  for (int replicas : {1, 3}) {
    CAPTURE(replicas);
    MirroredSync strategy(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = replicas});
    strategy.set_optimizer(optim::Adam{});
    strategy.engine().state().slots().slots.clear();  // as if restored for another optimizer
    Feed const feed(data, 48, strategy.replicas(), 1);
    CHECK_THROWS_WITH_AS(strategy.run(plan(5, feed)),
                         doctest::Contains("optimizer state does not fit Adam"), Error);
    CHECK(strategy.global_step() == 0);
  }
}

TEST_CASE("model() is refused during a run and allowed after it") {
  MirroredAsync strategy(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2});
  Feed const feed(data, 48, 2, 1);
  std::string message;
  strategy.run(plan(4, feed, [&](StepReport const&) {
    try {
      strategy.model();
    } catch (Error const& e) {
      message = e.what();
    }
    return true;
  }));
  CHECK(message.find("called during a run") != std::string::npos);
  // After the run, model() holds the central weights.
  CHECK(std::ranges::equal(strategy.model().variables().weights(), strategy.weights()));
}

TEST_CASE("replicas draw different generator streams, and a snapshot restores them") {
  MirroredSync strategy(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 3});
  auto& group = strategy.engine().state();
  Snapshot const saved = strategy.snapshot();
  REQUIRE(saved.generators.size() == 3);
  std::uint64_t draws[3];
  for (std::size_t r = 0; r < 3; ++r) draws[r] = group.replica(r).variables().rng()();
  CHECK(draws[0] != draws[1]);
  CHECK(draws[1] != draws[2]);
  strategy.restore(saved);  // back to before the draws
  for (std::size_t r = 0; r < 3; ++r) CHECK(group.replica(r).variables().rng()() == draws[r]);
  Snapshot broken = saved;
  broken.generators[1] = "not a generator";
  CHECK_THROWS_WITH_AS(strategy.restore(broken), doctest::Contains("does not parse"), Error);
}

TEST_CASE("a snapshot of another replica count keeps the global step and the data consumed") {
  MirroredSync three(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 3});
  Snapshot s = three.snapshot();
  s.counters = {.global_step = 10, .applied = 30, .dropped = 2, .local_steps = {10, 10, 10}};
  MirroredAsync two(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2});
  two.restore(s);
  CHECK(two.global_step() == 10);
  CHECK(two.counters().applied == 30);
  CHECK(two.counters().dropped == 2);
  // Each replica continues at the mean local step: with replica-sized batches of 1/2 instead of
  // 1/3 of the global batch, 2 x 10 of them are the same number of global batches as 3 x 10.
  CHECK(two.counters().local_steps == std::vector<std::int64_t>{10, 10});
}

TEST_CASE("timeouts must be positive") {
  using namespace std::chrono_literals;
  using S = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::BoundedStaleness<1>>;
  CHECK_THROWS_WITH_AS(S(nn::Mlp({6, 3}), place::Mirrored{.replicas = 2}, {},
                         sync::BoundedStaleness<1>{.timeout = 0ms}),
                       doctest::Contains("timeout is 0 ms; it must be positive"), Error);
}

TEST_CASE("set_weights reaches every replica and the central copy, under every engine") {
  auto check = [](auto strategy) {
    auto named = strategy.get_weights();
    for (auto& [name, tensor] : named) {
      for (auto& x : tensor.data) x = 0.25f;
    }
    strategy.set_weights(named);
    std::vector<float> const expected(strategy.layout().element_count(), 0.25f);
    CHECK(everywhere(strategy, expected));
    // And training starts from them: one step with a zero learning rate leaves them unchanged.
    strategy.set_optimizer(optim::Sgd{0.0f});
    Feed const feed(data, 48, strategy.replicas(), 1);
    strategy.run(plan(1, feed));
    CHECK(std::ranges::equal(strategy.weights(), expected));
  };
  check(MirroredSync(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2}));
  check(MirroredAsync(nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2}));
  check(CentralAsync(nn::Mlp({6, 4, 3}), place::CentralStorage{.replicas = 2}));
  check(Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::BoundedStaleness<1>>(
      nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2}));
}

TEST_CASE("writes into the weights check everything before changing anything") {
  CentralAsync strategy(nn::Mlp({6, 4, 3}), place::CentralStorage{.replicas = 2});
  auto const before = strategy.weights();
  auto& group = strategy.engine().state();
  std::vector<float> const too_long(before.size() + 7, 1.0f);
  CHECK_THROWS_AS(group.assign_flat(too_long), ShapeError);
  CHECK_THROWS_AS(group.assign_flat(std::span(too_long).first(3)), ShapeError);
  auto wrong = strategy.get_weights();
  wrong.begin()->second.data.assign(wrong.begin()->second.data.size(), 9.0f);
  wrong.erase(std::prev(wrong.end()));  // one variable missing
  CHECK_THROWS_WITH_AS(strategy.set_weights(wrong), doctest::Contains("missing"), LoadError);
  CHECK(group.central().size() == before.size());
  CHECK(everywhere(strategy, before));
  // Training still works on the unchanged arenas (today's heap overflow would show here).
  Feed const feed(data, 48, 2, 1);
  strategy.run(plan(20, feed));
  CHECK(strategy.global_step() == 20);
}

TEST_CASE("a model with a const member is replicated by copy and trains") {
  using S = Strategy<ConstMemberModel, place::Mirrored, comm::InProcess, sync::Asynchronous>;
  S strategy(ConstMemberModel{}, place::Mirrored{.replicas = 2});
  Feed const feed(data, 48, 2, 1);
  strategy.run(plan(10, feed));
  CHECK(strategy.global_step() == 10);
  CHECK(strategy.model().classes == 3);
}

}  // namespace test_strategy_strategy
