// ctest-labels: unit engine
// The bucket engine on the host, over the in-process exchange with real replica threads: where the
// buckets fall, every gradient reduced exactly once, reductions that start (and finish) while the
// backward pass still runs, and training that matches the unbucketed lock-step path bit for bit.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <convoy/comm/buckets/bucket_plan.hpp>
#include <convoy/comm/buckets/bucket_reducer.hpp>
#include <convoy/comm/buckets/collective_replica.hpp>
#include <convoy/comm/buckets/host_staged_exchange.hpp>
#include <convoy/comm/in_process/bucket_exchange.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <numeric>
#include <random>
#include <synthetic.hpp>
#include <thread>
#include <utility>
#include <vector>

namespace test_comm_buckets {

using namespace convoy;
using comm::Bucket;
using comm::BucketPlan;
using comm::BucketReducer;
using comm::in_process::BucketExchange;
using namespace std::chrono_literals;

namespace {

// Variables of 10, 20, 5 and 30 floats: 40, 80, 20 and 120 bytes.
Variables four_variables() {
  Variables vars("m");
  vars.add("a", {10});
  vars.add("b", {4, 5});
  vars.add("c", {5});
  vars.add("d", {3, 10});
  return vars;
}

// Every element of the arena in exactly one bucket, buckets in descending arena order.
void check_cover(BucketPlan const& plan, Variables const& vars) {
  std::size_t end = vars.element_count();
  std::size_t next_variable = vars.size();
  for (auto const& b : plan.buckets()) {
    CHECK(b.offset + b.size == end);
    CHECK(b.last_variable + 1 == next_variable);
    for (std::size_t v = b.first_variable; v <= b.last_variable; ++v)
      CHECK(plan.bucket_of(v) == static_cast<std::size_t>(&b - plan.buckets().data()));
    end = b.offset;
    next_variable = b.first_variable;
  }
  CHECK(end == 0);
  CHECK(next_variable == 0);
}

}  // namespace

TEST_CASE("buckets are runs of whole variables of at least the requested bytes, last first") {
  auto const vars = four_variables();
  SUBCASE("100 bytes") {
    BucketPlan const plan(vars, 100);
    REQUIRE(plan.size() == 3);
    CHECK(plan[0] == Bucket{.first_variable = 3, .last_variable = 3, .offset = 35, .size = 30});
    CHECK(plan[1] == Bucket{.first_variable = 1, .last_variable = 2, .offset = 10, .size = 25});
    CHECK(plan[2] == Bucket{.first_variable = 0, .last_variable = 0, .offset = 0, .size = 10});
    check_cover(plan, vars);
  }
  SUBCASE("one byte: a bucket per variable") {
    BucketPlan const plan(vars, 1);
    REQUIRE(plan.size() == 4);
    for (std::size_t b = 0; b < 4; ++b) CHECK(plan[b].first_variable == 3 - b);
    check_cover(plan, vars);
  }
  SUBCASE("more than the model: one bucket") {
    BucketPlan const plan(vars, 1 << 20);
    REQUIRE(plan.size() == 1);
    CHECK(plan[0] == Bucket{.first_variable = 0, .last_variable = 3, .offset = 0, .size = 65});
  }
  SUBCASE("exactly two variables' bytes") {
    BucketPlan const plan(vars, 140);  // d + c = 140
    REQUIRE(plan.size() == 2);
    CHECK(plan[0].first_variable == 2);
    CHECK(plan[1].first_variable == 0);
    check_cover(plan, vars);
  }
  CHECK_THROWS_WITH_AS(BucketPlan(vars, 0), doctest::Contains("0 bytes"), Error);
  CHECK_THROWS_WITH_AS(BucketPlan(Variables("empty"), 64), doctest::Contains("'empty'"), Error);
}

TEST_CASE("a bucket starts once all its variables are final, in plan order") {
  auto vars = four_variables();
  BucketPlan const plan(vars, 1);  // buckets 0..3 hold d, c, b, a
  BucketExchange exchange(1, plan.size(), 5s);
  auto port = exchange.port(0);
  BucketReducer reducer(plan, vars.grads(), port);
  reducer.ready(VariableId{2}, VariableId{2});  // c: bucket 1, behind bucket 0
  CHECK(reducer.started() == 0);
  reducer.ready(VariableId{3}, VariableId{3});  // d: buckets 0 and 1 go
  CHECK(reducer.started() == 2);
  reducer.ready(VariableId{2}, VariableId{3});  // again: counted once
  CHECK(reducer.started() == 2);
  reducer.finish();  // a and b, as a model that does not report would have them
  CHECK(reducer.started() == 4);
  for (std::size_t b = 0; b < plan.size(); ++b) CHECK(exchange.completed(b) == 1);
  CHECK_THROWS_WITH_AS(reducer.ready(VariableId{1}, VariableId{4}),
                       doctest::Contains("outside its 4"), Error);
}

TEST_CASE("every gradient is reduced exactly once, whatever order and overlap the reports have") {
  constexpr std::size_t replicas = 3;
  constexpr int steps = 4;
  auto const layout = four_variables();
  BucketPlan const plan(layout, 48);
  BucketExchange exchange(replicas, plan.size(), 10s);
  std::vector<Variables> vars(replicas, layout);
  std::vector<std::vector<float>> expected(steps, std::vector<float>(layout.element_count()));
  auto value = [](std::size_t r, int step, std::size_t i) {
    return static_cast<float>((r + 1) * 1000 + static_cast<std::size_t>(step) * 100 + i);
  };
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < layout.element_count(); ++i) {
      for (std::size_t r = 0; r < replicas; ++r) expected[s][i] += value(r, s, i);
    }
  }
  std::vector<std::vector<std::vector<float>>> seen(replicas);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] {
        auto port = exchange.port(r);
        BucketReducer reducer(plan, vars[r].grads(), port);
        std::mt19937 engine(static_cast<unsigned>(r * 7 + 1));
        for (int s = 0; s < steps; ++s) {
          reducer.begin_step();
          auto grads = vars[r].grads();
          for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = value(r, s, i);
          // Random ranges, some overlapping what was reported already; finish() takes the rest.
          for (int k = 0; k < 3; ++k) {
            std::size_t const first = engine() % layout.size();
            std::size_t const last = first + engine() % (layout.size() - first);
            reducer.ready(VariableId{first}, VariableId{last});
          }
          reducer.finish();
          seen[r].emplace_back(grads.begin(), grads.end());
        }
      });
    }
  }
  for (std::size_t r = 0; r < replicas; ++r) {
    REQUIRE(seen[r].size() == steps);
    for (int s = 0; s < steps; ++s) CHECK(seen[r][s] == expected[s]);
  }
  for (std::size_t b = 0; b < plan.size(); ++b) CHECK(exchange.completed(b) == steps);
}

namespace {

// An Mlp that, once its last layer's gradients are final, waits until the exchange has reduced
// bucket 0 before it goes on with the earlier layers. Without overlap the wait could only end by
// its deadline.
struct OverlapProbe {
  nn::Mlp mlp{{12, 32, 32, 3}};
  BucketExchange* exchange = nullptr;
  std::uint64_t step = 0;
  bool reduced_during_backward = true;
  std::vector<std::size_t> reported;  // first variable of each report, in order

  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& batch) { return mlp.forward_backward(batch); }
  float forward_backward(Batch const& batch, exec::Host const& ctx, GradientsReady ready) {
    ++step;
    auto probe = [&](VariableId first, VariableId last) {
      reported.push_back(first.index);
      ready(first, last);
      if (reported.size() % 3 != 1) return;  // only after the last layer's report
      auto const deadline = std::chrono::steady_clock::now() + 5s;
      while (exchange->completed(0) < step) {
        if (std::chrono::steady_clock::now() > deadline) {
          reduced_during_backward = false;
          return;
        }
        std::this_thread::sleep_for(100us);
      }
    };
    return mlp.forward_backward(batch, ctx, GradientsReady(probe));
  }
};

}  // namespace

TEST_CASE("bucket 0 is reduced while the earlier layers' backward passes still run") {
  constexpr std::size_t replicas = 2;
  auto const data = testing::synthetic_classes(64, 12, 3);
  OverlapProbe prototype;
  // mlp/layer3 (32x3 + 3 floats) alone in bucket 0; the other layers after it.
  BucketPlan const plan(prototype.variables(), 99 * sizeof(float));
  REQUIRE(plan[0].first_variable == 4);
  REQUIRE(plan.size() >= 2);
  BucketExchange exchange(replicas, plan.size(), 10s);
  prototype.exchange = &exchange;
  std::vector<OverlapProbe> models(replicas, prototype);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] {
        auto port = exchange.port(r);
        BucketReducer reducer(plan, models[r].variables().grads(), port);
        for (int s = 0; s < 3; ++s) {
          reducer.begin_step();
          forward_backward_reporting(models[r], data.slice(r * 32, 32), exec::Host{},
                                     reducer.hook());
          reducer.finish();
        }
      });
    }
  }
  for (auto const& m : models) {
    CHECK(m.reduced_during_backward);
    CHECK(m.reported == std::vector<std::size_t>{4, 2, 0, 4, 2, 0, 4, 2, 0});
  }
}

TEST_CASE("bucketed training matches the unbucketed lock-step path bit for bit") {
  constexpr std::size_t replicas = 3;
  constexpr std::size_t rows = 16;
  constexpr std::int64_t steps = 12;
  auto const data = testing::synthetic_classes(replicas * rows * steps, 12, 3);
  auto batch = [&](std::size_t r, std::int64_t step) {
    return data.slice((static_cast<std::size_t>(step) * replicas + r) * rows, rows);
  };
  nn::Mlp const prototype({12, 24, 16, 3});
  optim::Optimizer const sgd = optim::Sgd{.learning_rate = 0.1f};

  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> lock_step(
      prototype, place::Mirrored{.replicas = static_cast<int>(replicas)});
  lock_step.set_optimizer(sgd);
  lock_step.run(RunPlan{.until = steps, .batch = batch, .after_step = {}});

  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{1024}, std::size_t{1} << 20}) {
    CAPTURE(bucket_bytes);
    BucketPlan const plan(prototype.variables(), bucket_bytes);
    BucketExchange exchange(replicas, plan.size(), 10s);
    std::vector<nn::Mlp> models(replicas, prototype);
    {
      std::vector<std::jthread> threads;
      for (std::size_t r = 0; r < replicas; ++r) {
        threads.emplace_back([&, r] {
          auto port = exchange.port(r);
          auto slots = sgd.make_state(prototype.variables().element_count());
          comm::CollectiveReplica<nn::Mlp, exec::Host, BucketExchange::Port, sync::Synchronous>
              replica(models[r], exec::Host{}, plan, port, replicas, sgd, slots);
          for (std::int64_t s = 0; s < steps; ++s) replica.step(batch(r, s));
        });
      }
    }
    auto const expected = lock_step.weights();
    for (auto& m : models) {
      auto const w = m.variables().weights();
      REQUIRE(w.size() == expected.size());
      CHECK(std::memcmp(w.data(), expected.data(), w.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE(
    "under BoundedStaleness<S> replicas step alone and average their weights every S+1 steps") {
  constexpr std::size_t replicas = 3;
  constexpr std::size_t rows = 16;
  constexpr std::int64_t steps = 7;  // averages after steps 3 and 6; step 7 stays local
  using Sync = sync::BoundedStaleness<2>;
  auto const data = testing::synthetic_classes(replicas * rows * steps, 12, 3);
  auto batch = [&](std::size_t r, std::int64_t step) {
    return data.slice((static_cast<std::size_t>(step) * replicas + r) * rows, rows);
  };
  nn::Mlp const prototype({12, 24, 3});
  optim::Optimizer const momentum = optim::Momentum{.learning_rate = 0.05f, .momentum = 0.9f};

  // The reference, one replica after another on this thread: local steps, and the mean of the
  // weights (summed in replica order, then scaled) every third step.
  std::vector<nn::Mlp> reference(replicas, prototype);
  std::vector<optim::OptimizerState> slots;
  for (auto& m : reference) slots.push_back(momentum.make_state(m.variables().element_count()));
  for (std::int64_t s = 0; s < steps; ++s) {
    for (std::size_t r = 0; r < replicas; ++r) {
      auto& vars = reference[r].variables();
      reference[r].forward_backward(batch(r, s));
      momentum.apply(exec::Host{}, vars.weights(), vars.grads(), slots[r], 0, 1.0f, s + 1);
    }
    if ((s + 1) % 3 == 0) {
      auto sum = reference[0].variables().weights();
      for (std::size_t r = 1; r < replicas; ++r) {
        auto const w = reference[r].variables().weights();
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += w[i];
      }
      for (auto& x : sum) x *= 1.0f / static_cast<float>(replicas);
      for (std::size_t r = 1; r < replicas; ++r) reference[r].variables().set_flat(sum);
    }
  }

  BucketPlan const plan(prototype.variables(), 256);
  BucketExchange exchange(replicas, plan.size(), 10s);
  std::vector<nn::Mlp> models(replicas, prototype);
  std::vector<std::vector<float>> after_six(replicas);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] {
        auto port = exchange.port(r);
        auto slots = momentum.make_state(prototype.variables().element_count());
        comm::CollectiveReplica<nn::Mlp, exec::Host, BucketExchange::Port, Sync> replica(
            models[r], exec::Host{}, plan, port, replicas, momentum, slots);
        for (std::int64_t s = 0; s < steps; ++s) {
          replica.step(batch(r, s));
          if (s + 1 == 6) {
            auto const w = models[r].variables().weights();
            after_six[r].assign(w.begin(), w.end());
          }
        }
      });
    }
  }
  CHECK(exchange.completed(0) == 2);  // the weights, twice; no gradient bucket
  for (std::size_t r = 1; r < plan.size(); ++r) CHECK(exchange.completed(r) == 0);
  for (std::size_t r = 0; r < replicas; ++r) {
    CAPTURE(r);
    CHECK(after_six[r] == after_six[0]);  // equal right after an average
    auto const w = models[r].variables().weights();
    auto const expected = reference[r].variables().weights();
    CHECK(std::memcmp(w.data(), expected.data(), w.size() * sizeof(float)) == 0);
  }
  CHECK(models[1].variables().get_flat() != models[0].variables().get_flat());  // step 7: local
}

TEST_CASE("a replica that never hands in its bucket ends the wait with its name") {
  auto vars = four_variables();
  BucketPlan const plan(vars, 1 << 20);
  BucketExchange exchange(3, plan.size(), 200ms);
  auto port = exchange.port(0);
  BucketReducer reducer(plan, vars.grads(), port);
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(reducer.finish(),
                       doctest::Contains("bucket 0, which replica(s) 1, 2 did not hand in"),
                       TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // The others are told at once, not after their own timeout, and of a timeout.
  auto other = exchange.port(1);
  other.start(0, vars.grads());
  CHECK_THROWS_WITH_AS(other.wait(), doctest::Contains("replica 0 waited 200 ms"), TimeoutError);
}

namespace {

// A context whose "stream" is a queue run in order at synchronize(): what HostStagedExchange needs
// of a device (exec::Cuda), with the asynchrony a device has, on the host.
struct QueuedStream {
  bool device = true;
  std::shared_ptr<std::vector<std::function<void()>>> queue =
      std::make_shared<std::vector<std::function<void()>>>();
  bool on_device() const { return device; }
  void copy_async(float* to, float const* from, std::size_t n) const {
    queue->push_back([=] { std::memcpy(to, from, n * sizeof(float)); });
  }
  void then_on_host(void (*fn)(void*), void* arg) const {
    queue->push_back([=] { fn(arg); });
  }
  std::pmr::memory_resource* batch_memory() const { return std::pmr::new_delete_resource(); }
  void synchronize() const {
    auto const work = std::exchange(*queue, {});
    for (auto const& w : work) w();
  }
};
static_assert(comm::stages_through_host<QueuedStream>);

// An exchange whose peer holds the same values: each span handed in is doubled by wait().
struct DoublingPort {
  std::vector<std::pair<std::size_t, std::span<float>>> started;
  bool fail = false;
  void start(std::size_t bucket, std::span<float> values) {
    if (fail) throw Error("the exchange is gone");
    started.emplace_back(bucket, values);
  }
  void wait() {
    for (auto& [bucket, values] : started)
      for (float& v : values) v *= 2.0f;
    started.clear();
  }
};

}  // namespace

TEST_CASE("a device replica's buckets go through host memory in stream order and come back") {
  DoublingPort port;
  QueuedStream stream;
  comm::HostStages stages;
  comm::HostStagedExchange<DoublingPort, QueuedStream> staged(port, stream, stages);
  std::vector<float> device(8);
  std::iota(device.begin(), device.end(), 1.0f);
  // The host memory the port is handed for the second half, through `exchange`.
  auto const handed_in = [&](auto& exchange) {
    exchange.start(0, std::span(device).subspan(4, 4));
    stream.synchronize();
    REQUIRE(port.started.size() == 1);
    CHECK(port.started[0].first == 0);
    float const* copy = port.started[0].second.data();
    exchange.wait();
    return copy;
  };
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    auto const before = device;
    staged.start(0, std::span(device).subspan(4, 4));
    staged.start(1, std::span(device).first(4));
    CHECK(port.started.empty());  // handed in only once the stream has copied them out
    staged.wait();
    for (std::size_t i = 0; i < device.size(); ++i) CHECK(device[i] == 2.0f * before[i]);
    CHECK(stream.queue->empty());
  }
  // The port saw host copies, never the device's memory, and the same stages in every round.
  float const* const stage = handed_in(staged);
  CHECK(stage != device.data() + 4);
  CHECK(handed_in(staged) == stage);
  // The stages are the caller's, so that the fabric may still hold one after the exchange is gone
  // (a failed round), and the next run's exchange takes them again.
  REQUIRE(stages.size() == 2);
  {
    comm::HostStagedExchange<DoublingPort, QueuedStream> next_run(port, stream, stages);
    CHECK(handed_in(next_run) == stage);
  }
  CHECK(stages.size() == 2);

  SUBCASE("a hand-in that fails ends the wait with its error") {
    port.fail = true;
    staged.start(0, std::span(device).first(4));
    CHECK_THROWS_WITH_AS(staged.wait(), doctest::Contains("the exchange is gone"), Error);
  }
  SUBCASE("on the host the port gets the spans themselves") {
    QueuedStream host{.device = false};
    comm::HostStages unused;
    comm::HostStagedExchange<DoublingPort, QueuedStream> direct(port, host, unused);
    direct.start(3, std::span(device).first(2));
    REQUIRE(port.started.size() == 1);
    CHECK(port.started[0].second.data() == device.data());
    direct.wait();
    CHECK(host.queue->empty());
  }
}

}  // namespace test_comm_buckets
