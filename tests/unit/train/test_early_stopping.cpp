// early_stopping: stops after `patience` evaluations without an improvement larger than
// min_delta, in the monitored direction, and says why.
#include <doctest/doctest.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/early_stopping.hpp>
#include <convoy/train/trainer.hpp>
#include <sstream>
#include <synthetic.hpp>

namespace test_train_early_stopping {

using namespace convoy;

namespace {
io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

HistoryRecord evaluation(std::int64_t step, double loss, double accuracy) {
  HistoryRecord r;
  r.kind = RecordKind::evaluation;
  r.global_step = step;
  r.validation =
      Metrics{.loss_sum = loss * 100, .correct = std::size_t(accuracy * 100), .count = 100};
  return r;
}
}  // namespace

TEST_CASE("early stopping counts evaluations without improvement, in the monitor's direction") {
  std::ostringstream log;
  RunControl control;  // not {.log = &log}: g++ -Wextra warns of each std::function member before it
  control.log = &log;
  auto hooks = callbacks::early_stopping({.monitor = {.min_delta = 0.05}, .patience = 2});
  hooks.on_begin(control);
  CHECK(hooks.on_evaluate(evaluation(1, 1.00, 0.5), control));
  CHECK(hooks.on_evaluate(evaluation(2, 0.90, 0.5), control));        // better by 0.10: best now
  CHECK(hooks.on_evaluate(evaluation(3, 0.87, 0.5), control));        // better by 0.03 only: 1
  CHECK(hooks.on_evaluate(evaluation(4, 0.95, 0.5), control));        // worse: 2
  CHECK_FALSE(hooks.on_evaluate(evaluation(5, 0.88, 0.5), control));  // 3 > patience
  CHECK(log.str() ==
        "convoy: early stopping at global step 5: val_loss has not fallen below 0.9 (global step "
        "2) by more than 0.05 in 3 evaluations\n");

  auto accuracy = callbacks::early_stopping(
      {.monitor = {.metric = callbacks::Metric::val_accuracy}, .patience = 0});
  accuracy.on_begin(control);
  CHECK(accuracy.on_evaluate(evaluation(1, 1.0, 0.5), control));
  CHECK(accuracy.on_evaluate(evaluation(2, 2.0, 0.6), control));  // higher is better
  CHECK_FALSE(accuracy.on_evaluate(evaluation(3, 0.1, 0.6), control));
  CHECK_THROWS_AS(callbacks::early_stopping({.patience = -1}), Error);
}

TEST_CASE("early stopping ends fit() with a line saying why") {
  Trainer<Mirrored> trainer{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                            optim::Sgd{0.1f}};
  std::ostringstream log;
  // No loss falls by 10 in one step: only the first evaluation improves.
  auto const result = trainer.fit(
      data,
      {.steps = 100,
       .batch_size = 96,
       .log_every = 0,
       .log = &log,
       .validation = &data,
       .evaluate_every = 1,
       .hooks = {callbacks::early_stopping({.monitor = {.min_delta = 10.0}, .patience = 2})}});
  CHECK(result.global_step == 4);  // best at 1; 2 and 3 within patience; 4 stops
  CHECK(log.str().find("convoy: early stopping at global step 4: val_loss has not fallen below") !=
        std::string::npos);
}

}  // namespace test_train_early_stopping
