// sync::Synchronous over comm::InProcess: N replicas take exactly the step one replica takes on the
// N-times batch, runs are bit-identical, and with replicas_to_aggregate a stalled replica does not
// stall the others.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/io/sampler.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstring>
#include <latch>
#include <memory>
#include <numeric>
#include <feed.hpp>
#include <random>
#include <synthetic.hpp>
#include <thread>
#include <vector>

namespace test_sync_synchronous {

using namespace convoy;
using testing::Feed;
using testing::plan;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

struct Trace {
  std::vector<float> losses;
  std::vector<float> weights;
  std::int64_t global_step = 0;
  std::int64_t applied = 0;
  std::int64_t batches = 0;
};

// Trains `steps` steps with a global batch of `batch` rows and records every step's loss.
// `jitter_seed` > 0 makes every replica sleep a random 0-2 ms before each batch, so that the order
// in which replicas arrive differs from run to run.
template <class P, class S = sync::Synchronous>
Trace train(P placement, std::size_t batch, std::int64_t steps,
            optim::Optimizer opt = optim::Sgd{0.2f}, S sync = {}, unsigned jitter_seed = 0) {
  Strategy<nn::Mlp, P, comm::InProcess, S> strategy(nn::Mlp({12, 16, 3}), placement, {}, sync);
  strategy.set_optimizer(opt);
  Feed const feed(data, batch, strategy.replicas(), 7);
  std::vector<std::mt19937> jitter;
  for (std::size_t r = 0; r < strategy.replicas(); ++r) jitter.emplace_back(jitter_seed * 31 + r);
  Trace trace;
  strategy.run(plan(
      steps,
      [&](std::size_t r, std::int64_t k) {
        if (jitter_seed > 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter[r]() % 2000));
        return feed(r, k);
      },
      [&](StepReport const& report) {
        trace.losses.push_back(report.loss);
        return true;
      }));
  trace.weights = strategy.weights();
  trace.global_step = strategy.global_step();
  trace.applied = strategy.counters().applied;
  trace.batches = strategy.counters().batches();
  return trace;
}

void check_close(Trace const& a, Trace const& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    CHECK(a.losses[i] == doctest::Approx(b.losses[i]).epsilon(1e-4));
  REQUIRE(a.weights.size() == b.weights.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < a.weights.size(); ++i)
    worst = std::max(worst, double(std::abs(a.weights[i] - b.weights[i])));
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_CASE("N mirrored replicas match one replica on the N-times batch") {
  Trace const one = train(place::Host{}, 96, 30);
  for (int replicas : {2, 3, 4}) {
    CAPTURE(replicas);
    Trace const many = train(place::Mirrored{.replicas = replicas}, 96, 30);
    check_close(many, one);
    CHECK(many.global_step == 30);  // one update per step, as TensorFlow counts
    CHECK(many.applied == 30 * replicas);
  }
  // The losses must actually move, or matching them would prove nothing.
  CHECK(one.losses.back() < 0.5f * one.losses.front());
}

TEST_CASE("central storage matches one replica, with every optimizer") {
  for (optim::Optimizer opt :
       {optim::Optimizer{optim::Sgd{0.2f}}, optim::Optimizer{optim::Momentum{0.05f, 0.9f}},
        optim::Optimizer{optim::Adam{0.01f}}}) {
    CAPTURE(opt.name());
    check_close(train(place::CentralStorage{.replicas = 2}, 96, 20, opt),
                train(place::Host{}, 96, 20, opt));
    check_close(train(place::Mirrored{.replicas = 3}, 96, 20, opt),
                train(place::Host{}, 96, 20, opt));
  }
}

TEST_CASE("synchronous runs are bit-identical whatever order the replicas arrive in") {
  Trace const a = train(place::Mirrored{.replicas = 3}, 96, 25, optim::Sgd{0.2f}, {}, 1);
  Trace const b = train(place::Mirrored{.replicas = 3}, 96, 25, optim::Sgd{0.2f}, {}, 2);
  REQUIRE(a.weights.size() == b.weights.size());
  CHECK(std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)) == 0);
}

TEST_CASE("every mirrored replica holds the same weights after each step") {
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
      nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 3});
  Feed const feed(data, 96, 3);
  auto& group = strategy.engine().state();
  int identical = 0;
  strategy.run(plan(10, feed, [&](StepReport const&) {
    bool same = true;
    for (std::size_t r = 1; r < 3; ++r) {
      auto a = group.replica(0).variables().weights(), b = group.replica(r).variables().weights();
      same = same && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    }
    identical += same ? 1 : 0;
    return true;
  }));
  CHECK(identical == 10);
  CHECK(strategy.global_step() == 10);
}

TEST_CASE("with replicas_to_aggregate a stalled replica does not stall the others") {
  using namespace std::chrono_literals;
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
      nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 3}, {},
      sync::Synchronous{.replicas_to_aggregate = 2, .timeout = 20s});
  Feed const feed(data, 96, 3);
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  std::latch stalled(1);
  std::vector<std::size_t> contributors;
  strategy.run(plan(40,
                [&](std::size_t r, std::int64_t k) {
                  if (r == 2) {  // replica 2 stalls until the others have finished all 40 steps
                    stalled.count_down();
                    std::unique_lock lock(mutex);
                    released.wait(lock, [&] { return release; });
                  } else if (k == 0) {
                    stalled.wait();  // the others start once replica 2 is stuck inside step 1
                  }
                  return feed(r, k);
                },
                [&](StepReport const& report) {
                  contributors.push_back(report.replica);
                  if (report.global_step == 40) {
                    std::lock_guard lock(mutex);
                    release = true;
                    released.notify_all();
                  }
                  return true;
                }));
  CHECK(strategy.global_step() == 40);
  CHECK(strategy.counters().applied == 80);  // two gradients per step
  CHECK(strategy.counters().dropped == 1);   // the stalled replica's gradient came too late
  CHECK(strategy.counters().local_steps[2] == 0);  // and its batch goes back, to be learned later
  for (auto r : contributors) CHECK(r != 2);
}

TEST_CASE(
    "a synchronous step that cannot gather its gradients times out naming the missing replicas") {
  using namespace std::chrono_literals;
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
      nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 3}, {},
      sync::Synchronous{.replicas_to_aggregate = 2, .timeout = 200ms});
  Feed const feed(data, 96, 3);
  auto const woke = std::make_shared<std::latch>(2);
  auto run = [&] {
    strategy.run(plan(5, [feed, woke](std::size_t r, std::int64_t k) {
      auto batch = feed(r, k);
      if (r != 0) {  // two of three replicas stall, long past the timeout
        std::this_thread::sleep_for(1500ms);
        woke->count_down();
      }
      return batch;
    }));
  };
  // Either replica 0's wait for a second gradient or the stalled replicas' own step times out
  // first; both name replicas 1 and 2.
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("1, 2"), TimeoutError);
  woke->wait();  // the abandoned replicas are out of this test's code before it ends
}

TEST_CASE("an error in one replica stops the run and reaches the caller") {
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> strategy(
      nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2});
  Feed const feed(data, 96, 2);
  auto run = [&] {
    strategy.run(plan(50, [&](std::size_t r, std::int64_t k) {
      if (r == 1 && k == 3) throw DatasetError("replica 1 ran out of data");
      return feed(r, k);
    }));
  };
  CHECK_THROWS_WITH_AS(run(), "replica 1 ran out of data", DatasetError);
  CHECK(strategy.global_step() == 3);
}

TEST_CASE("replicas_to_aggregate outside 0..replicas is refused") {
  using S = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  CHECK_THROWS_WITH_AS(S(nn::Mlp({4, 2}), place::Mirrored{.replicas = 2}, {},
                         sync::Synchronous{.replicas_to_aggregate = 3}),
                       doctest::Contains("replicas_to_aggregate is 3 but there are 2 replicas"),
                       Error);
}

TEST_CASE("the fused exchange updates and broadcasts every chunk, in and out of the caches") {
  // One arena small enough for ordinary stores and one large enough for streaming stores.
  for (std::size_t floats : {std::size_t{100003}, comm::in_process::streaming_floats + 1000}) {
    CAPTURE(floats);
    std::size_t const replicas = 3;
    std::vector<std::vector<float>> grads(replicas, std::vector<float>(floats));
    std::vector<std::vector<float>> weights(replicas, std::vector<float>(floats, 1.0f));
    for (std::size_t r = 0; r < replicas; ++r) {
      for (std::size_t i = 0; i < floats; ++i) grads[r][i] = static_cast<float>((i * (r + 1)) % 7);
    }
    std::vector<float const*> grad_ptrs;
    for (auto& g : grads) grad_ptrs.push_back(g.data());
    optim::Optimizer const sgd = optim::Sgd{0.5f};
    auto slots = sgd.make_state(floats);
    for (std::size_t t = 0; t < replicas;
         ++t) {  // each "thread" in turn: its chunk to every replica
      std::vector<float*> destinations{weights[t].data()};
      for (std::size_t u = 0; u < replicas; ++u) {
        if (u != t) destinations.push_back(weights[u].data());
      }
      auto [b, e] = comm::in_process::chunk_bounds(floats, replicas, t);
      comm::in_process::reduce_apply_broadcast(exec::Host{}, grad_ptrs, b, e, destinations, floats, sgd, slots, 1);
    }
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < floats; ++i) {
      float const mean = (grads[0][i] + grads[1][i] + grads[2][i]) / 3.0f;
      for (std::size_t r = 0; r < replicas; ++r)
        wrong += weights[r][i] == doctest::Approx(1.0f - 0.5f * mean) ? 0 : 1;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("one of two: each step applies the first gradient alone and drops the other's") {
  Trace const t = train(place::Mirrored{.replicas = 2}, 96, 60, optim::Sgd{0.2f},
                        sync::Synchronous{.replicas_to_aggregate = 1});
  CHECK(t.global_step == 60);
  CHECK(t.applied == 60);
  CHECK(t.batches == 60);  // dropped gradients' batches are computed again, not counted twice
  REQUIRE(t.losses.size() == 60);
  // It learns: the last ten updates' mean loss against the first five's. One batch of 48 rows is
  // too noisy a witness, and which replica's rows each update takes depends on timing.
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0f) / float(last - first); };
  CHECK(mean(t.losses.end() - 10, t.losses.end()) < 0.6f * mean(t.losses.begin(), t.losses.begin() + 5));
}

}  // namespace test_sync_synchronous
