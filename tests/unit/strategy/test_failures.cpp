// ctest-labels: unit fault
// The failure model, in every in-process engine: an exception thrown by forward_backward, the
// optimizer or after_step reaches the caller of run() with every thread joined; after_step
// returning false stops the run; a replica that never returns from its step ends the run with a
// TimeoutError naming it; and an asynchronous run carries on past a failed replica and reports it
// at the end.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <feed.hpp>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <stdexcept>
#include <synthetic.hpp>
#include <thread>

#include "clog_capture.hpp"

namespace test_strategy_failures {

using namespace convoy;
using namespace std::chrono_literals;
using testing::Feed;
using testing::plan;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

// Which replica and local step the calling thread computes: the batch function and
// forward_backward of one replica run on the same thread.
thread_local std::size_t current_replica = 0;
thread_local std::int64_t current_step = 0;

// Set by forward_backward just before its injected throw. An asynchronous run does not wait for a
// slow replica, so on a busy machine the others could finish the run before the faulty replica
// reaches its step; a test that needs the fault to happen holds the others at a step till it has.
std::atomic<bool> fault_thrown{false};
std::atomic<std::int64_t> hold_others_at{-1};

// What the test makes a replica do at one of its steps, shared by every copy of the model.
struct Faults {
  static constexpr std::size_t every_replica = static_cast<std::size_t>(-1);
  std::size_t replica = 0;     // or every_replica
  std::int64_t throw_at = -1;  // forward_backward throws at this local step
  std::int64_t hang_at = -1;   // forward_backward does not return at this local step...
  std::shared_future<void> released = std::promise<void>().get_future().share();  // ...till then
};

struct FaultyMlp {
  nn::Mlp mlp{{12, 8, 3}};
  std::shared_ptr<Faults> faults = std::make_shared<Faults>();
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& b) {
    bool const mine =
        faults->replica == Faults::every_replica || current_replica == faults->replica;
    if (mine && current_step == faults->throw_at) {
      fault_thrown = true;
      throw std::runtime_error("injected fault in forward_backward");
    }
    if (current_replica == faults->replica && current_step == faults->hang_at) {
      faults->released.wait();
    }
    return mlp.forward_backward(b);
  }
};

template <class P, class S>
struct Config {
  using strategy_type = Strategy<FaultyMlp, P, comm::InProcess, S>;
  P placement;
  S sync;
  static constexpr bool asynchronous = std::same_as<S, sync::Asynchronous>;
  // With backup replicas (M < N) the first M to ask take a step's places, so one given replica may
  // never reach a given local step: the fault goes to whichever replica reaches it first.
  static constexpr bool backups = false;

  strategy_type make(FaultyMlp const& model, std::chrono::milliseconds timeout = 20s) const {
    S s = sync;
    s.timeout = timeout;
    strategy_type strategy(model, placement, {}, s);
    strategy.set_optimizer(optim::Momentum{0.05f, 0.9f});
    return strategy;
  }
};

struct HostSync : Config<place::Host, sync::Synchronous> {};
struct MirroredSync : Config<place::Mirrored, sync::Synchronous> {
  MirroredSync() { placement.replicas = 2; }
};
struct CentralSync : Config<place::CentralStorage, sync::Synchronous> {
  CentralSync() { placement.replicas = 2; }
};
struct TwoOfThree : Config<place::Mirrored, sync::Synchronous> {
  static constexpr bool backups = true;
  TwoOfThree() {
    placement.replicas = 3;
    sync.replicas_to_aggregate = 2;
  }
};
struct MirroredAsync : Config<place::Mirrored, sync::Asynchronous> {
  MirroredAsync() { placement.replicas = 2; }
};
struct CentralBounded : Config<place::CentralStorage, sync::BoundedStaleness<1>> {
  CentralBounded() { placement.replicas = 2; }
};

// Every step takes at least 100 us, so that every replica gets to the step a fault is set for
// before the others have finished the run.
template <class S>
RunPlan fault_plan(S const& strategy, std::int64_t until,
                   std::function<bool(StepReport const&)> after = {}) {
  Feed const feed(data, 96, strategy.replicas());
  return plan(
      until,
      [feed](std::size_t r, std::int64_t k) {
        current_replica = r;
        current_step = k;
        std::this_thread::sleep_for(100us);
        if (k == hold_others_at) {
          for (int i = 0; i < 2000 && !fault_thrown; ++i) std::this_thread::sleep_for(5ms);
        }
        return feed(r, k);
      },
      std::move(after));
}

// The strategy still trains: every thread of the failed run is gone and the state is usable.
template <class S>
void still_trains(S& strategy) {
  strategy.set_optimizer(optim::Sgd{0.1f});
  auto const from = strategy.global_step();
  strategy.run(fault_plan(strategy, from + 6));
  CHECK(strategy.global_step() >= from + 6);
}

// While it lives, every replica that reaches local step `step` waits (10 s at most) till the
// injected fault has been thrown.
struct HoldOthers {
  explicit HoldOthers(std::int64_t step) {
    fault_thrown = false;
    hold_others_at = step;
  }
  ~HoldOthers() { hold_others_at = -1; }
  HoldOthers(HoldOthers const&) = delete;
  HoldOthers& operator=(HoldOthers const&) = delete;
};

}  // namespace

TEST_CASE_TEMPLATE("a throw in forward_backward reaches the caller with every thread joined", C,
                   HostSync, MirroredSync, CentralSync, TwoOfThree, MirroredAsync, CentralBounded) {
  C const config;
  FaultyMlp model;
  auto strategy = config.make(model);
  model.faults->replica = strategy.replicas() - 1;
  if constexpr (C::backups) model.faults->replica = Faults::every_replica;
  model.faults->throw_at = 3;
  testing::ClogCapture capture;
  if constexpr (C::asynchronous) {
    // The others train to the end; the failure is logged at once and reported at the end.
    HoldOthers const hold(5);
    try {
      strategy.run(fault_plan(strategy, 40));
      FAIL("no ReplicaError");
    } catch (ReplicaError const& e) {
      CHECK(e.replicas == std::vector<std::size_t>{strategy.replicas() - 1});
      CHECK(std::string(e.what()).find("injected fault in forward_backward") != std::string::npos);
    }
    CHECK(fault_thrown);
    CHECK(strategy.global_step() == 40);
    CHECK(capture.text.str().find("replica 1 failed and stops; the others carry on") !=
          std::string::npos);
  } else {
    CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 40)),
                         "injected fault in forward_backward", std::runtime_error);
    CHECK(strategy.global_step() < 40);
  }
  model.faults->throw_at = -1;
  still_trains(strategy);
}

TEST_CASE_TEMPLATE("a throw in the optimizer reaches the caller with every thread joined", C,
                   HostSync, MirroredSync, CentralSync, TwoOfThree, MirroredAsync, CentralBounded) {
  C const config;
  auto strategy = config.make(FaultyMlp{});
  auto& group = strategy.engine().state();
  // After global step 3 the optimizer's slots are taken away, so its next apply() throws.
  auto after = [&](StepReport const& r) {
    if (r.global_step == 3) {
      std::unique_lock lock(group.gate());  // as every writer of the state during a run must
      group.slots().slots.clear();
    }
    return true;
  };
  CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 40, after)),
                       doctest::Contains("Momentum needs 1 slot arrays"), Error);
  CHECK(strategy.global_step() < 40);
  still_trains(strategy);
}

TEST_CASE_TEMPLATE("a throw in after_step reaches the caller with every thread joined", C, HostSync,
                   MirroredSync, CentralSync, TwoOfThree, MirroredAsync, CentralBounded) {
  C const config;
  auto strategy = config.make(FaultyMlp{});
  auto after = [](StepReport const& r) {
    if (r.global_step == 4) throw DatasetError("injected fault in after_step");
    return true;
  };
  CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 40, after)),
                       "injected fault in after_step", DatasetError);
  CHECK(strategy.global_step() >= 4);
  CHECK(strategy.global_step() <= 4 + static_cast<std::int64_t>(strategy.replicas()));
  still_trains(strategy);
}

TEST_CASE_TEMPLATE("after_step returning false stops the run", C, HostSync, MirroredSync,
                   CentralSync, TwoOfThree, MirroredAsync, CentralBounded) {
  C const config;
  auto strategy = config.make(FaultyMlp{});
  strategy.run(fault_plan(strategy, 40, [](StepReport const& r) { return r.global_step < 5; }));
  if (strategy.lock_step()) {
    CHECK(strategy.global_step() == 5);
  } else {  // replicas already computing finish their step
    CHECK(strategy.global_step() >= 5);
    CHECK(strategy.global_step() <= 5 + static_cast<std::int64_t>(strategy.replicas()));
  }
  still_trains(strategy);
}

TEST_CASE_TEMPLATE("a replica that never returns ends the run with a TimeoutError naming it", C,
                   HostSync, MirroredSync, CentralSync, TwoOfThree, MirroredAsync, CentralBounded) {
  C const config;
  std::promise<void> release;
  FaultyMlp model;
  model.faults->released = release.get_future().share();
  auto strategy = config.make(model, 300ms);
  auto const stuck = strategy.replicas() - 1;
  model.faults->replica = stuck;
  model.faults->hang_at = 2;
  auto const start = std::chrono::steady_clock::now();
  std::string const expected =
      "replica " + std::to_string(stuck) + " did not finish a step within 300 ms";
  CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 1000)),
                       doctest::Contains(expected.c_str()), TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  // The strategy says why it cannot run again, and its state can still be read.
  CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 1000)),
                       doctest::Contains("never came back"), Error);
  CHECK(strategy.snapshot().counters.global_step == strategy.global_step());
  release.set_value();  // let the abandoned thread go home before the test ends
}

TEST_CASE("an asynchronous run told to stop on error rethrows the first one as it was") {
  MirroredAsync config;
  config.sync.stop_on_error = true;
  FaultyMlp model;
  auto strategy = config.make(model);
  model.faults->replica = 0;
  model.faults->throw_at = 2;
  HoldOthers const hold(5);
  CHECK_THROWS_WITH_AS(strategy.run(fault_plan(strategy, 400)),
                       "injected fault in forward_backward", std::runtime_error);
  CHECK(strategy.global_step() < 400);
}

TEST_CASE("an asynchronous run goes on while all but one replica have failed") {
  MirroredAsync config;
  config.placement.replicas = 3;
  FaultyMlp model;
  auto strategy = config.make(model);
  model.faults->replica = 1;
  model.faults->throw_at = 0;  // replica 1 fails at once
  HoldOthers const hold(5);
  testing::ClogCapture capture;
  CHECK_THROWS_AS(strategy.run(fault_plan(strategy, 60)), ReplicaError);
  CHECK(strategy.global_step() == 60);
  CHECK(strategy.counters().local_steps[1] == 0);
}

}  // namespace test_strategy_failures
