// Learning-rate schedules and Strategy::set_learning_rate: the rates the schedules give, and a
// rate changed from a callback applies to the updates that follow, in lock step and
// asynchronously, and appears in the history.
#include <doctest/doctest.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/learning_rate.hpp>
#include <convoy/train/trainer.hpp>
#include <cstring>
#include <synthetic.hpp>
#include <vector>

namespace test_train_learning_rate {

using namespace convoy;

namespace {
io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
}  // namespace

TEST_CASE("step decay, cosine, and warm-up in front of cosine give the rates of their formulas") {
  auto const decay = callbacks::step_decay(0.1f, 0.5f, 10);
  CHECK(decay(0) == doctest::Approx(0.1f));
  CHECK(decay(9) == doctest::Approx(0.1f));
  CHECK(decay(10) == doctest::Approx(0.05f));
  CHECK(decay(25) == doctest::Approx(0.025f));
  auto const cos = callbacks::cosine(1.0f, 100, 0.1f);
  CHECK(cos(0) == doctest::Approx(1.0f));
  CHECK(cos(50) == doctest::Approx(0.55f));
  CHECK(cos(100) == doctest::Approx(0.1f));
  CHECK(cos(500) == doctest::Approx(0.1f));
  auto const warm = callbacks::warm_up(10, callbacks::cosine(1.0f, 100));
  CHECK(warm(0) == doctest::Approx(0.1f));
  CHECK(warm(4) == doctest::Approx(0.5f));
  CHECK(warm(9) == doctest::Approx(1.0f));
  CHECK(warm(10) == doctest::Approx(1.0f));
  CHECK(warm(60) == doctest::Approx(0.5f));
  CHECK(warm(110) == doctest::Approx(0.0f));
  CHECK_THROWS_AS(callbacks::step_decay(0.1f, 0.5f, 0), Error);
  CHECK_THROWS_AS(callbacks::cosine(0.1f, 0), Error);
  CHECK_THROWS_AS(callbacks::warm_up(-1, callbacks::cosine(0.1f, 5)), Error);
}

TEST_CASE("a rate set from a callback applies from the next update on, in lock step") {
  auto make = [] {
    return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                             optim::Sgd{0.1f}};
  };
  // Five steps at 0.1, then a rate of 0: the weights must end as after five steps.
  auto five = make();
  five.fit(data, {.steps = 5, .batch_size = 96, .log = nullptr});
  auto scheduled = make();
  callbacks::Schedule const stop_after_five = [](std::int64_t step) {
    return step < 5 ? 0.1f : 0.0f;
  };
  auto const result =
      scheduled.fit(data, {.steps = 12,
                           .batch_size = 96,
                           .log_every = 4,
                           .log = nullptr,
                           .hooks = {callbacks::learning_rate_schedule(stop_after_five)}});
  auto const a = five.strategy().weights(), b = scheduled.strategy().weights();
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  // The record's rate is the rate of its interval's last update.
  REQUIRE(result.history.size() == 3);
  CHECK(result.history[0].lr == doctest::Approx(0.1f));  // update 4
  CHECK(result.history[1].lr == 0.0f);                   // update 8
  CHECK(scheduled.strategy().optimizer().learning_rate() == 0.0f);
  // And a schedule really moves the weights while its rate is above 0.
  CHECK(five.strategy().weights() != make().strategy().weights());
}

TEST_CASE("a rate set from a callback of an asynchronous run holds for every later update") {
  Trainer<Async> trainer{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                         optim::Momentum{0.05f, 0.0f}};
  std::vector<float> at_ten;
  Callback probe = [&](StepReport const& r) {
    if (r.global_step == 5) trainer.strategy().set_learning_rate(0.0f);
    if (r.global_step == 10) at_ten = trainer.strategy().weights();
    return true;
  };
  trainer.fit(data, {.steps = 30, .batch_size = 96, .log = nullptr, .callbacks = {probe}});
  // Every update that began after step 5's callback applied a rate of 0: nothing moved after 10.
  CHECK(trainer.strategy().weights() == at_ten);
}

TEST_CASE("a rate that is negative or not finite is refused, changing nothing") {
  Mirrored strategy{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}};
  strategy.set_optimizer(optim::Adam{0.01f});
  CHECK_THROWS_WITH_AS(strategy.set_learning_rate(-1.0f),
                       doctest::Contains("Adam got learning rate"), Error);
  CHECK_THROWS_AS(strategy.set_learning_rate(std::numeric_limits<float>::quiet_NaN()), Error);
  CHECK(strategy.optimizer().learning_rate() == 0.01f);
  strategy.set_learning_rate(0.5f);
  CHECK(strategy.optimizer().learning_rate() == 0.5f);
  auto const& adam = std::get<optim::Adam>(strategy.optimizer().get());
  CHECK(adam.beta1 == 0.9f);  // only the rate changed
}

}  // namespace test_train_learning_rate
