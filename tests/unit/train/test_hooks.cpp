// RunControl's weights and gradients by name: in lock step the gradients are the ones the
// optimizer applied (plain SGD moves every weight by -learning_rate times them, checked at every
// step of a two-replica run); where no one gradient was applied (asynchronous), there are none.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <map>
#include <optional>
#include <string>
#include <synthetic.hpp>

namespace test_train_hooks {

using namespace convoy;

namespace {
io::Dataset const data = testing::synthetic_classes(960, 12, 3);
}

TEST_CASE("in lock step, a hook reads the applied gradients: w(step) = w(step - 1) - lr * g") {
  using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  float const lr = 0.1f;
  Trainer<Mirrored> trainer{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                            optim::Sgd{lr}};
  std::map<std::string, Tensor> previous;
  int steps_checked = 0;
  double largest_gradient = 0.0;
  Hooks hooks;
  hooks.on_begin = [&](RunControl& control) { previous = control.weights(); };
  hooks.on_step = [&](StepReport const&, RunControl& control) {
    auto const weights = control.weights();
    auto const gradients = control.gradients();
    REQUIRE(gradients.size() == weights.size());
    for (auto const& [name, w] : weights) {
      auto const& g = gradients.at(name);
      auto const& before = previous.at(name);
      REQUIRE(g.shape == w.shape);
      for (std::size_t i = 0; i < w.data.size(); ++i) {
        CHECK(w.data[i] == doctest::Approx(before.data[i] - lr * g.data[i]).epsilon(1e-5));
        largest_gradient = std::max(largest_gradient, std::abs(double(g.data[i])));
      }
    }
    previous = weights;
    ++steps_checked;
    return true;
  };
  trainer.fit(data, {.steps = 6, .batch_size = 96, .log = nullptr, .hooks = {hooks}});
  CHECK(steps_checked == 6);
  CHECK(largest_gradient > 1e-3);  // the check above compared real updates
  // Between runs too, and the weights are the trainer's.
  CHECK(trainer.strategy().get_gradients().size() == 4);
  CHECK(trainer.get_weights() == previous);
}

TEST_CASE("asynchronous replicas give no gradients, and weights still by name") {
  using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
  Trainer<Async> trainer{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                         optim::Sgd{0.1f}};
  std::optional<std::size_t> gradients, weights;
  Hooks hooks;
  hooks.on_step = [&](StepReport const&, RunControl& control) {
    gradients = control.gradients().size();
    weights = control.weights().size();
    return true;
  };
  trainer.fit(data, {.steps = 4, .batch_size = 96, .log = nullptr, .hooks = {hooks}});
  CHECK(gradients == std::size_t{0});
  CHECK(weights == std::size_t{4});
}

}  // namespace test_train_hooks
