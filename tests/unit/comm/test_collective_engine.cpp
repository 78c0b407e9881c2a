// ctest-labels: unit engine
// comm::Nccl's engine on the host: CollectiveEngine over the in-process bucket exchange, with real
// replica threads, behind the unmodified Strategy and Trainer. It must train like the lock-step
// in-process engine bit for bit, carry its counters and optimizer slots across runs and
// snapshots, give every replica the run's replica 0's state at the start of a run, and end a run
// whose replica fails with that replica's error instead of a hang.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <convoy/comm/buckets/collective_engine.hpp>
#include <convoy/comm/in_process/bucket_fabric.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <synthetic.hpp>
#include <thread>
#include <vector>

namespace test_comm_collective_engine {

namespace {

using namespace convoy;
using namespace std::chrono_literals;

// The Comm policy of docs/nccl.md's host fabric: comm::Nccl's engine over threads.
struct Collective {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "Collective";
  static constexpr bool collective = true;
  std::size_t bucket_bytes = 256;  // several buckets for the small models here
  std::chrono::milliseconds timeout{10s};
  template <class M, class P, class S>
  using engine = comm::CollectiveEngine<M, P, S, comm::in_process::BucketFabric>;
};

constexpr std::size_t replicas = 3;
constexpr std::size_t rows = 16;
io::Dataset const data = testing::synthetic_classes(replicas * rows * 24, 12, 3);
Batch batch_of(std::size_t r, std::int64_t step) {
  return data.slice((static_cast<std::size_t>(step) * replicas + r) * rows, rows);
}
RunPlan until(std::int64_t steps) {
  return RunPlan{.until = steps, .batch = batch_of, .after_step = {}};
}

template <class Comm, class Sync = sync::Synchronous>
using MirroredOver = Strategy<nn::Mlp, place::Mirrored, Comm, Sync>;
place::Mirrored const three{.replicas = static_cast<int>(replicas)};
optim::Optimizer const momentum = optim::Momentum{.learning_rate = 0.05f, .momentum = 0.9f};

bool same_bits(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// An Mlp whose forward_backward throws on the `fail_at`-th call over all its copies.
struct Flaky {
  nn::Mlp mlp{{12, 16, 3}};
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  int fail_at = 0;
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& batch) {
    if (++*calls == fail_at) throw std::runtime_error("flaky forward_backward");
    return mlp.forward_backward(batch);
  }
};

// An Mlp whose forward_backward sleeps once, on the `sleep_at`-th call over all its copies.
struct Sleepy {
  nn::Mlp mlp{{12, 16, 3}};
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  int sleep_at = 0;
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& batch) {
    if (++*calls == sleep_at) std::this_thread::sleep_for(1s);
    return mlp.forward_backward(batch);
  }
};

// The in-process fabric with what the NCCL fabric adds: its view of who stopped answering.
struct ExplainingFabric : comm::in_process::BucketFabric {
  using BucketFabric::BucketFabric;
  std::string explain_timeout() const { return "the board's view of who is missing"; }
};
struct ExplainingCollective : Collective {
  template <class M, class P, class S>
  using engine = comm::CollectiveEngine<M, P, S, ExplainingFabric>;
};

}  // namespace

TEST_CASE("the collective engine trains like the lock-step engine, bit for bit, across runs") {
  nn::Mlp const prototype({12, 24, 16, 3});
  MirroredOver<comm::InProcess> lock_step(prototype, three);
  lock_step.set_optimizer(momentum);
  lock_step.run(until(12));

  MirroredOver<Collective> collective(prototype, three);
  collective.set_optimizer(momentum);
  CHECK(collective.replicas() == replicas);
  CHECK(collective.lock_step());
  CHECK(collective.chief());
  collective.run(until(5));  // two runs: the slots' update count and the counters carry over
  collective.run(until(12));
  CHECK(same_bits(collective.weights(), lock_step.weights()));
  auto const& c = collective.counters();
  CHECK(c.global_step == 12);
  CHECK(c.applied == 36);
  CHECK(c.local_steps == std::vector<std::int64_t>{12, 12, 12});
  auto const mine = collective.snapshot();
  auto const theirs = lock_step.snapshot();
  CHECK(mine.optimizer_updates == theirs.optimizer_updates);
  for (auto const& slot : theirs.slots) {  // not a structured binding: clang 14 cannot capture it
    CAPTURE(slot.first);
    CHECK(mine.slots.at(slot.first).data == slot.second.data);
  }
  // Every replica holds the same weights after a synchronous step.
  auto& group = collective.engine().state().group();
  for (std::size_t r = 1; r < replicas; ++r) {
    CHECK(group.variables(r).get_flat() == group.variables(0).get_flat());
  }
}

TEST_CASE("a run starts every replica from the run's replica 0: weights, slots and counters") {
  nn::Mlp const prototype({12, 16, 3});
  MirroredOver<comm::InProcess> reference(prototype, three);
  reference.set_optimizer(momentum);
  reference.run(until(6));
  Snapshot const at_six = reference.snapshot();
  reference.run(until(10));

  MirroredOver<Collective> collective(prototype, three);
  collective.set_optimizer(momentum);
  collective.restore(at_six);
  // Replicas 1 and 2 hold something else, as ranks that were never restored would.
  auto& group = collective.engine().state().group();
  for (std::size_t r = 1; r < replicas; ++r) {
    std::vector<float> junk(group.layout().element_count(), 7.0f * static_cast<float>(r));
    group.variables(r).set_flat(junk);
  }
  collective.run(until(10));
  CHECK(collective.global_step() == 10);
  CHECK(same_bits(collective.weights(), reference.weights()));
  for (std::size_t r = 1; r < replicas; ++r) {
    CHECK(group.variables(r).get_flat() == group.variables(0).get_flat());
  }
}

TEST_CASE("Trainer over the collective engine gives each replica its own slice, as over Mirrored") {
  nn::Mlp const prototype({12, 16, 3});
  FitOptions const options{.steps = 20, .batch_size = 48, .log = nullptr};
  Trainer<MirroredOver<comm::InProcess>> mirrored(MirroredOver<comm::InProcess>(prototype, three),
                                                  momentum);
  Trainer<MirroredOver<Collective>> collective(MirroredOver<Collective>(prototype, three),
                                               momentum);
  auto const expected = mirrored.fit(data, options);
  auto const result = collective.fit(data, options);
  CHECK(result.global_step == 20);
  CHECK(result.applied == expected.applied);
  CHECK(result.last_loss == expected.last_loss);
  CHECK(same_bits(collective.strategy().weights(), mirrored.strategy().weights()));
}

TEST_CASE("under BoundedStaleness<S> the collective averages the weights every S+1 steps") {
  using Strategy2 = MirroredOver<Collective, sync::BoundedStaleness<2>>;
  Strategy2 collective(nn::Mlp({12, 16, 3}), three);
  collective.set_optimizer(momentum);
  auto& group = collective.engine().state().group();
  collective.run(until(6));  // averaged after steps 3 and 6
  for (std::size_t r = 1; r < replicas; ++r) {
    CHECK(group.variables(r).get_flat() == group.variables(0).get_flat());
  }
  collective.run(until(7));  // a local step on each replica's own batch
  CHECK(group.variables(1).get_flat() != group.variables(0).get_flat());
  CHECK(collective.counters().global_step == 7);
}

namespace {
// The largest difference between two sets of named tensors with the same names and shapes.
float largest_difference(std::map<std::string, Tensor> const& a,
                         std::map<std::string, Tensor> const& b) {
  REQUIRE(a.size() == b.size());
  float largest = 0.0f;
  for (auto const& entry : a) {
    CAPTURE(entry.first);
    auto const& other = b.at(entry.first).data;
    REQUIRE(other.size() == entry.second.data.size());
    for (std::size_t i = 0; i < other.size(); ++i)
      largest = std::max(largest, std::abs(other[i] - entry.second.data[i]));
  }
  return largest;
}
}  // namespace

TEST_CASE("get_gradients over the collective is the mean gradient, as in lock step") {
  nn::Mlp const prototype({12, 16, 3});
  MirroredOver<comm::InProcess> lock_step(prototype, three);
  MirroredOver<Collective> collective(prototype, three);
  auto const zeros = lock_step.get_gradients();  // zeros before the first step
  CHECK(largest_difference(collective.get_gradients(), zeros) == 0.0f);
  lock_step.run(until(3));
  collective.run(until(3));
  // The same weights, so the same gradients; only the order of the sum differs.
  REQUIRE(same_bits(collective.weights(), lock_step.weights()));
  auto const mean = lock_step.get_gradients();
  CHECK(largest_difference(mean, zeros) > 1e-3f);
  CHECK(largest_difference(collective.get_gradients(), mean) < 1e-6f);

  // Under BoundedStaleness<S> each replica applies its own: the mean of this process's replicas'.
  MirroredOver<Collective, sync::BoundedStaleness<2>> stale(prototype, three);
  stale.run(until(2));
  auto& group = stale.engine().state().group();
  std::vector<float> own_mean(stale.layout().element_count(), 0.0f);
  for (std::size_t r = 0; r < replicas; ++r) {
    auto const grads = group.variables(r).grads();
    for (std::size_t i = 0; i < own_mean.size(); ++i) own_mean[i] += grads[i] / 3.0f;
  }
  CHECK(group.variables(1).get_flat() != group.variables(0).get_flat());  // they differ here
  CHECK(largest_difference(stale.get_gradients(), stale.layout().named(own_mean)) < 1e-6f);
}

TEST_CASE("a replica that throws ends the run with its error, and the spent collective says so") {
  Flaky prototype;
  prototype.fail_at = 3 * 4 + 2;  // in the fifth step
  Strategy<Flaky, place::Mirrored, Collective, sync::Synchronous> collective(
      prototype, three, Collective{.timeout = 2s});
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(collective.run(until(20)), "flaky forward_backward");
  CHECK(std::chrono::steady_clock::now() - start < 2s);  // the others were told, not timed out
  CHECK(collective.global_step() == 4);
  CHECK_THROWS_WITH_AS(collective.run(until(20)),
                       doctest::Contains("stopped in an earlier run"), Error);
}

TEST_CASE("a timed-out exchange says what the fabric knows of who stopped answering") {
  Sleepy prototype;
  prototype.sleep_at = 3 * 2 + 1;  // the first replica of the third step sleeps past the timeout
  Strategy<Sleepy, place::Mirrored, ExplainingCollective, sync::Synchronous> collective(
      prototype, three, ExplainingCollective{{.timeout = 300ms}});
  try {
    collective.run(until(10));
    FAIL("the run should have timed out");
  } catch (TimeoutError const& e) {
    std::string const what = e.what();
    CHECK(what.find("; the board's view of who is missing") != std::string::npos);
  }
  CHECK(collective.global_step() == 2);
}

TEST_CASE("a lock step of data planned again counts the plan's batches its rows make") {
  // Three replicas of 16 rows each took 5 steps; one left (its 5 batches retired), and the two
  // others go on from step 5 towards 30 batches: the data of 10 of the three's steps.
  RunPlan plan;
  plan.until_batches = 30;
  plan.batch_rows = 16;
  std::vector<float> const losses{1.0f, 1.0f};
  auto steps_to_goal = [&](std::int64_t global_batch) {
    Counters c{.global_step = 5, .applied = 15, .local_steps = {5, 5}, .retired = 5};
    c.data = {.step = 5, .row = 240, .batch = global_batch, .replicas = 2};
    comm::in_process::FirstError error;
    while (!comm::in_process::count_lock_step(c, losses, 0.0, 0, plan, error))
      REQUIRE(c.global_step < 99);
    CHECK(c.batches() >= 30);
    CHECK(c.batches() < 33);
    CHECK(c.local_steps == std::vector<std::int64_t>(2, c.global_step));
    return c.global_step;
  };
  CHECK(steps_to_goal(48) == 10);  // the global batch kept: 48 rows a step, 3 batches' worth
  CHECK(steps_to_goal(32) == 13);  // each replica's batch kept: 2 batches a step, 10 more steps
  plan.batch_rows = 0;             // a plan that does not say: one batch a replica
  CHECK(steps_to_goal(48) == 13);
}

TEST_CASE("counters cross the float exchange exactly, negative ones too, every int64") {
  std::vector<std::int64_t> const counts{
      0, 1, (std::int64_t{1} << 21) - 1, std::int64_t{1} << 21, (std::int64_t{1} << 62) + 12345,
      INT64_MAX, -1, -12345, INT64_MIN};
  std::vector<float> wire(counts.size() * comm::detail::pieces_per_count);
  comm::detail::encode_counts(counts, wire);
  for (float& x : wire) x += 0.0f;  // what the other replicas add
  std::vector<std::int64_t> back(counts.size());
  comm::detail::decode_counts(wire, back);
  CHECK(back == counts);
}

TEST_CASE("the collective refuses backup replicas and logs where everything is") {
  using S = MirroredOver<Collective>;
  CHECK_THROWS_WITH_AS(S(nn::Mlp({12, 3}), three, {}, sync::Synchronous{.replicas_to_aggregate = 2}),
                       doctest::Contains("replicas_to_aggregate 2 of 3"), Error);
  S collective(nn::Mlp({12, 16, 3}, "net"), three);
  std::ostringstream log;
  collective.log_placement(log);
  CHECK(log.str().find("Strategy<Mirrored, Collective, Synchronous>, replicas 0-2 of 3 here; "
                       "the in-process bucket exchange among 3 threads") != std::string::npos);
  CHECK(log.str().find("net/layer1/kernel {12, 16} -> mirrored on /cpu:0, /cpu:0, /cpu:0") !=
        std::string::npos);
}

TEST_CASE("a learning rate changed between steps takes effect under the collective") {
  // A schedule sets the rate from after_step, with every replica at rest; the replicas must read
  // the rate then, not keep the one the run started with.
  nn::Mlp const prototype({12, 24, 16, 3});
  MirroredOver<Collective> collective(prototype, three);
  collective.set_optimizer(optim::Sgd{.learning_rate = 0.1f});
  auto plan = until(6);
  std::vector<float> after_third;
  plan.after_step = [&](StepReport const& r) {
    if (r.global_step == 3) {
      collective.set_learning_rate(0.0f);
      after_third = collective.weights();
    }
    return true;
  };
  collective.run(plan);
  CHECK(same_bits(collective.weights(), after_third));  // a rate of 0 from step 4 on
}

}  // namespace test_comm_collective_engine
