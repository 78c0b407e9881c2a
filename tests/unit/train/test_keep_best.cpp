// keep_best: the file holds the weights of the best evaluation seen, saved by name, and its path
// is refused before the first step when it cannot be written.
#include <doctest/doctest.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/keep_best.hpp>
#include <convoy/train/callbacks/learning_rate.hpp>
#include <convoy/train/trainer.hpp>
#include <helpers.hpp>
#include <synthetic.hpp>
#include <temp_dir.hpp>

namespace test_train_keep_best {

using namespace convoy;

namespace {
io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<Mirrored> make_trainer(float rate = 0.1f) {
  return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                           optim::Sgd{rate}};
}
}  // namespace

TEST_CASE("keep_best saves the weights of the best evaluation, by name") {
  testing::TempDir dir("keep-best");
  auto trainer = make_trainer();
  callbacks::KeepBest best(dir / "best.pbin", {.metric = callbacks::Metric::val_accuracy});
  std::vector<float> weights_at_best;
  std::int64_t step_of_best = 0;
  double best_accuracy = -1.0;
  Hooks watch;  // after keep_best in the list, so it sees the same evaluations
  watch.on_evaluate = [&](HistoryRecord const& r, RunControl&) {
    if (r.val_accuracy().value() > best_accuracy) {
      best_accuracy = *r.val_accuracy();
      step_of_best = r.global_step;
      weights_at_best = trainer.strategy().weights();
    }
    return true;
  };
  auto const result = trainer.fit(data, {.steps = 40,
                                         .batch_size = 96,
                                         .log = nullptr,
                                         .validation = &data,
                                         .evaluate_every = 5,
                                         .hooks = {best, watch}});
  REQUIRE(best.best().has_value());
  CHECK(*best.best() == doctest::Approx(best_accuracy));
  CHECK(best.best_step() == step_of_best);
  auto saved = make_trainer();
  saved.load_weights(dir / "best.pbin");
  CHECK(saved.strategy().weights() == weights_at_best);
  CHECK(saved.evaluate(data).accuracy() == doctest::Approx(best_accuracy));
  CHECK(result.history.size() > 1);
}

TEST_CASE("keep_best keeps an earlier file when later evaluations are worse") {
  testing::TempDir dir("keep-best-worse");
  auto trainer = make_trainer();
  callbacks::KeepBest best(dir / "best.bin");  // val_loss, lower is better
  callbacks::Schedule unstable = [](std::int64_t step) { return step < 20 ? 0.1f : 50.0f; };
  trainer.fit(data, {.steps = 40,
                     .batch_size = 96,
                     .log = nullptr,
                     .validation = &data,
                     .evaluate_every = 10,
                     .hooks = {best, callbacks::learning_rate_schedule(unstable)}});
  // Step 20's weights are the best: the rate of 50 ruins the later ones.
  CHECK(best.best_step() == 20);
  auto saved = make_trainer();
  saved.load_weights(dir / "best.bin");
  CHECK(saved.evaluate(data).mean_loss() == doctest::Approx(*best.best()));
  // The final weights are worse (their loss is higher, or not even a number).
  CHECK_FALSE(trainer.evaluate(data).mean_loss() <= *best.best());
}

TEST_CASE("a best-weights path that cannot be written is refused, by name, before training") {
  testing::TempDir dir("keep-best-refused");
  int steps = 0;
  Callback count = [&](StepReport const&) { return ++steps > 0; };
  auto trainer = make_trainer();
  auto const missing = dir / "nowhere" / "best.bin";
  CHECK_THROWS_WITH_AS(
      trainer.fit(data, {.steps = 5,
                         .batch_size = 96,
                         .log = nullptr,
                         .validation = &data,
                         .callbacks = {count},
                         .hooks = {callbacks::KeepBest(missing)}}),
      doctest::Contains(doctest::String(("best-weights file '" + missing.string() + "'").c_str())),
      Error);
  CHECK_THROWS_WITH_AS(trainer.fit(data, {.steps = 5,
                                          .batch_size = 96,
                                          .log = nullptr,
                                          .validation = &data,
                                          .callbacks = {count},
                                          .hooks = {callbacks::KeepBest(dir / "best.txt")}}),
                       doctest::Contains(doctest::String(((dir / "best.txt").string()).c_str())),
                       Error);
  CHECK(steps == 0);
}

}  // namespace test_train_keep_best
