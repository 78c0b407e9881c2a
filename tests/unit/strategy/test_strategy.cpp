// Strategy's own contracts: checks made before a run starts (so a bad state cannot hang the
// threads), model() refused during a run, replicas with their own generator streams, and counters
// restored from another replica count.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/io/sampler.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <synthetic.hpp>

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(480, 6, 3);

template <class S>
RunPlan plan_for(S& strategy, std::vector<io::BatchBuffer>& buffers, io::Sampler const& sampler,
                 std::int64_t until, std::function<bool(StepReport const&)> after = {}) {
  buffers.resize(strategy.replicas());
  return {until,
          [&](std::size_t r, std::int64_t k) { return sampler.fill(data, r, k, buffers[r]); },
          std::move(after)};
}

}  // namespace

TEST_CASE("an optimizer state that does not fit is refused before any thread starts") {
  for (int replicas : {1, 3}) {
    CAPTURE(replicas);
    Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
        nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = replicas});
    strategy.set_optimizer(optim::Adam{});
    strategy.optimizer_state().slots.clear();  // as if restored for another optimizer
    io::Sampler const sampler(data.rows(), 48, strategy.replicas(), 1);
    std::vector<io::BatchBuffer> buffers;
    CHECK_THROWS_WITH_AS(strategy.run(plan_for(strategy, buffers, sampler, 5)),
                         doctest::Contains("optimizer state does not fit Adam"), Error);
    CHECK(strategy.step() == 0);
  }
}

TEST_CASE("model() is refused during a run and allowed after it") {
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous> strategy(
      nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2});
  io::Sampler const sampler(data.rows(), 48, 2, 1);
  std::vector<io::BatchBuffer> buffers;
  std::string message;
  strategy.run(plan_for(strategy, buffers, sampler, 4, [&](StepReport const&) {
    try {
      strategy.model();
    } catch (Error const& e) {
      message = e.what();
    }
    return true;
  }));
  CHECK(message.find("called during a run") != std::string::npos);
  // After the run, model() holds the central weights.
  auto const& w = strategy.model().variables().weights();
  CHECK(std::equal(w.begin(), w.end(), strategy.weights().begin()));
}

TEST_CASE("replicas draw different generator streams, and their states round-trip") {
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
      nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 3});
  std::string const saved = strategy.generator_state();
  std::uint64_t draws[3];
  for (std::size_t r = 0; r < 3; ++r) draws[r] = strategy.replica(r).variables().rng()();
  CHECK(draws[0] != draws[1]);
  CHECK(draws[1] != draws[2]);
  strategy.set_generator_state(saved);  // back to before the draws
  for (std::size_t r = 0; r < 3; ++r) CHECK(strategy.replica(r).variables().rng()() == draws[r]);
  std::string const current = strategy.generator_state();
  strategy.set_generator_state("not\nthree\nlines\nat all");  // another replica count: ignored
  CHECK(strategy.generator_state() == current);
}

TEST_CASE("counters from a checkpoint of another replica count are shared out") {
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous> async(
      nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2});
  async.set_counters(10, 30, 0, {10, 10, 10});
  CHECK(async.replica_steps() == std::vector<std::int64_t>{15, 15});
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> lockstep(
      nn::Mlp({6, 4, 3}), place::Mirrored{.replicas = 2});
  lockstep.set_counters(10, 30, 0, {10, 10, 10});
  CHECK(lockstep.replica_steps() == std::vector<std::int64_t>{10, 10});
}

TEST_CASE("timeouts must be positive") {
  using namespace std::chrono_literals;
  using S = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::BoundedStaleness<1>>;
  CHECK_THROWS_WITH_AS(S(nn::Mlp({6, 3}), place::Mirrored{.replicas = 2}, {},
                         sync::BoundedStaleness<1>{.timeout = 0ms}),
                       doctest::Contains("timeout is 0 ms; it must be positive"), Error);
}
