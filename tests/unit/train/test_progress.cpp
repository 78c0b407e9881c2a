// Progress lines, the history fit() returns, per-epoch validation and the hooks' order: the loss
// of a line is the mean over its interval, its rates are wall-clock, and epochs and totals follow
// the data, also after a lock-step group changed its size.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/early_stopping.hpp>
#include <convoy/train/callbacks/keep_best.hpp>
#include <convoy/train/callbacks/learning_rate.hpp>
#include <convoy/train/callbacks/metrics_log.hpp>
#include <convoy/train/run_progress.hpp>
#include <convoy/train/trainer.hpp>
#include <filesystem>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <thread>
#include <vector>

namespace test_train_progress {

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<Mirrored> make_trainer() {
  return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                           optim::Adam{0.01f}};
}

// Returns 1, 2, 3... as its loss (one replica: the loss of global step k is k), and sleeps
// `sleep_ms` per step so that wall-clock rates can be told from compute time.
struct CountingModel {
  Variables vars{"counting"};
  VariableId w = vars.add("w", {1});
  int calls = 0;
  int sleep_ms = 0;
  Variables& variables() { return vars; }
  float forward_backward(Batch const&) {
    if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    vars.grad(w)[0] = 0.0f;
    return static_cast<float>(++calls);
  }
};
using Counting = Strategy<CountingModel, place::Host, comm::InProcess, sync::Synchronous>;

std::vector<std::string> lines_of(std::string const& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("duration_text reads as a person writes durations") {
  CHECK(duration_text(12.34) == "12.3 s");
  CHECK(duration_text(41.4, false) == "41 s");
  CHECK(duration_text(200.0) == "3 min 20 s");
  CHECK(duration_text(7500.0) == "2 h 05 min");
  CHECK(duration_text(-1.0) == "? s");
}

TEST_CASE("a progress line shows epoch and step of their totals, rates, elapsed time and ETA") {
  HistoryRecord r;
  r.epoch = 3;
  r.global_step = 1200;
  r.elapsed_s = 12.3;
  r.loss = 0.41234;
  r.samples_per_s = 15230.4;
  r.seconds_per_step = 0.0131;
  CHECK(progress_line(r, {.epochs = 20, .steps = 6000, .eta_s = 41.2}) ==
        "epoch 3/20  step 1200/6000  loss 0.4123  15230 samples/s  0.0131 s/step  12.3 s elapsed, "
        "ETA 41 s");
  CHECK(progress_line(r, {}, 7).find("step 1200  loss") != std::string::npos);
  CHECK(progress_line(r, {}, 7).find("(7 late gradients dropped so far)") != std::string::npos);
  // A synchronous group that lost a worker: the line says so, once, at the change.
  r.gradients_per_step = 1.2;
  CHECK(progress_line(r, {}, 0, 2).ends_with("  (the group changed: 1 gradient(s) a step, was 2)"));
  CHECK(progress_line(r, {}).find("group") == std::string::npos);
}

TEST_CASE("fit prints progress lines by default, each with its totals and an ETA") {
  auto trainer = make_trainer();
  std::ostringstream log;
  auto const result =
      trainer.fit(data, {.steps = 40, .batch_size = 96, .log_every = 10, .log = &log});
  std::regex const shape(
      R"(^epoch (\d)/4  step (\d+)/40  loss [0-9.e+-]+  \d+ samples/s  [0-9.e+-]+ s/step  )"
      R"([0-9.]+ s elapsed, ETA \d+ s$)");
  std::vector<std::string> progress;
  for (auto const& line : lines_of(log.str())) {
    if (line.starts_with("epoch ")) progress.push_back(line);
  }
  REQUIRE(progress.size() == 4);
  for (std::size_t i = 0; i < progress.size(); ++i) {
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_match(progress[i], m, shape), progress[i]);
    // 960 rows in batches of 96: 10 global steps an epoch.
    CHECK(m[1].str() == std::to_string(i + 1));
    CHECK(m[2].str() == std::to_string(10 * (i + 1)));
  }
  CHECK(log.str().find("training steps") == std::string::npos);
  REQUIRE(result.history.size() == 4);
  CHECK(result.history.back().global_step == 40);
  CHECK(result.history.back().epoch == 4);
}

TEST_CASE("a record's loss is the mean over its interval, not the last batch's") {
  Trainer<Counting> trainer{Counting{CountingModel{}}, optim::Sgd{0.1f}};
  auto const result =
      trainer.fit(data, {.steps = 10, .batch_size = 96, .log_every = 4, .log = nullptr});
  // Intervals: steps 1-4, 5-8, and the rest of the run, 9-10.
  REQUIRE(result.history.size() == 3);
  CHECK(result.history[0].global_step == 4);
  CHECK(*result.history[0].loss == doctest::Approx(2.5));  // (1+2+3+4)/4, the last batch's is 4
  CHECK(*result.history[1].loss == doctest::Approx(6.5));
  CHECK(result.history[2].global_step == 10);
  CHECK(*result.history[2].loss == doctest::Approx(9.5));
  CHECK(result.last_loss == 10.0f);
  for (auto const& r : result.history) {
    CHECK(r.kind == RecordKind::interval);
    CHECK(r.lr == doctest::Approx(0.1f));
    CHECK_FALSE(r.validation.has_value());
  }
}

TEST_CASE("seconds per step and samples per second are wall-clock over the interval") {
  // Two replicas in lock step each sleep 20 ms a step: a step takes at least 20 ms of wall time.
  using TwoCounting = Strategy<CountingModel, place::Mirrored, comm::InProcess, sync::Synchronous>;
  CountingModel slow;
  slow.sleep_ms = 20;
  Trainer<TwoCounting> trainer{TwoCounting{slow, place::Mirrored{.replicas = 2}}, optim::Sgd{0.1f}};
  auto const start = std::chrono::steady_clock::now();
  auto const result =
      trainer.fit(data, {.steps = 10, .batch_size = 96, .log_every = 5, .log = nullptr});
  double const wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(result.history.size() == 2);
  double seconds = 0.0;
  for (auto const& r : result.history) {
    REQUIRE(r.seconds_per_step.has_value());
    CHECK(*r.seconds_per_step >= 0.019);
    // 96 rows of applied gradients a global step.
    CHECK(*r.samples_per_s * *r.seconds_per_step == doctest::Approx(96.0).epsilon(1e-6));
    // Both replicas' gradients in every step.
    REQUIRE(r.gradients_per_step.has_value());
    CHECK(*r.gradients_per_step == 2.0);
    seconds += 5 * *r.seconds_per_step;
  }
  CHECK(seconds <= wall);
  CHECK(result.history[1].elapsed_s >= seconds * 0.99);
}

TEST_CASE("after a lock-step group changed, rates count the rows trained and totals its rate") {
  // 3 replicas of 100 rows, a goal of 200 batches. Steps 1-10 as begun: 3 batches a step. Steps
  // 11-20: 2 replicas keeping the global batch, 2 gradients of 150 rows (3 batches) a step. Steps
  // 21-30: 2 replicas each keeping its batch: 2 batches a step.
  RunPlan plan;
  plan.until_batches = 200;
  detail::RunProgress progress{.plan = plan,
                               .batches_per_epoch = 30,
                               .rows_per_gradient = 100.0,
                               .lock_step_batches = 3,
                               .start = detail::RunProgress::Clock::now(),
                               .interval = {detail::RunProgress::Clock::now(), 0, 0, 0}};
  CHECK(progress.totals(0, 0).steps == 67);  // 200 / 3, rounded
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  progress.close_interval(10, 30, 30);
  auto const before = progress.interval.time;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto const kept = progress.close_interval(20, 60, 50);
  double const seconds = std::chrono::duration<double>(progress.interval.time - before).count();
  CHECK(kept.samples_per_s == doctest::Approx(30 * 100.0 / seconds));  // not 20 gradients' rows
  CHECK(kept.gradients_per_step == doctest::Approx(2.0));
  CHECK(progress.totals(20, 60).steps == 67);  // still 3 batches a step
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  progress.close_interval(30, 80, 70);
  CHECK(progress.totals(30, 80).steps == 90);  // 120 batches left at 2 a step
  CHECK(progress.totals(30, 80).epochs == 7);  // 200 batches of 30 an epoch
}

TEST_CASE("the validation set is evaluated at each epoch's end, recorded and printed") {
  auto trainer = make_trainer();
  std::ostringstream log;
  std::vector<std::int64_t> ended;
  Hooks watch;
  watch.on_epoch_end = [&](std::int64_t epoch, RunControl&) {
    ended.push_back(epoch);
    return true;
  };
  auto const result = trainer.fit(data, {.epochs = 3,
                                         .batch_size = 96,
                                         .log_every = 0,
                                         .log = &log,
                                         .validation = &data,
                                         .evaluate_each_epoch = true,
                                         .hooks = {watch}});
  CHECK(ended == std::vector<std::int64_t>{1, 2, 3});
  std::vector<HistoryRecord> evaluations;
  for (auto const& r : result.history) {
    if (r.kind == RecordKind::evaluation) evaluations.push_back(r);
  }
  // One per epoch; the final evaluation is the third one, not repeated.
  REQUIRE(evaluations.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(evaluations[i].global_step == static_cast<std::int64_t>(10 * (i + 1)));
    CHECK(evaluations[i].epoch == static_cast<std::int64_t>(i + 1));
    REQUIRE(evaluations[i].validation.has_value());
    CHECK(evaluations[i].validation->count == 960);
    CHECK_FALSE(evaluations[i].loss.has_value());
  }
  REQUIRE(result.validation.has_value());
  CHECK(result.validation->accuracy() == evaluations[2].validation->accuracy());
  CHECK(evaluations[2].validation->accuracy() > evaluations[0].validation->accuracy() - 0.05);
  CHECK(log.str().find("epoch 2/3  step 20/30  validation loss ") != std::string::npos);
  // log_every 0: the whole run is one interval, recorded before the evaluation of its last step.
  REQUIRE(result.history.size() == 4);
  CHECK(result.history[2].kind == RecordKind::interval);
  CHECK(result.history[2].global_step == 30);
  CHECK(result.history[3].kind == RecordKind::evaluation);
}

TEST_CASE("hooks run in order around the run, and one returning false stops it") {
  auto trainer = make_trainer();
  std::vector<std::string> calls;
  Hooks hooks;
  hooks.on_check = [&](RunControl&) { calls.push_back("check"); };
  hooks.on_begin = [&](RunControl& c) {
    calls.push_back("begin@" + std::to_string(c.global_step()));
  };
  hooks.on_interval = [&](HistoryRecord const& r, RunControl&) {
    calls.push_back("interval@" + std::to_string(r.global_step));
    return r.global_step < 10;
  };
  hooks.on_end = [&](RunControl&) { calls.push_back("end"); };
  auto const result = trainer.fit(
      data, {.steps = 40, .batch_size = 96, .log_every = 5, .log = nullptr, .hooks = {hooks}});
  CHECK(result.global_step == 10);
  CHECK(calls == std::vector<std::string>{"check", "begin@0", "interval@5", "interval@10", "end"});
}

TEST_CASE("evaluate_each_epoch without a validation set is refused by name") {
  auto trainer = make_trainer();
  CHECK_THROWS_WITH_AS(trainer.fit(data, {.steps = 5, .log = nullptr, .evaluate_each_epoch = true}),
                       doctest::Contains("evaluate_each_epoch needs a validation set"), Error);
}

TEST_CASE("the program of docs/training_output.md trains, logs, schedules and keeps the best") {
  testing::TempDir dir("training-output-doc");
  auto trainer = make_trainer();
  auto const& train = data;
  auto const& validation = data;
  std::ostringstream log;
  // example-begin training-output
  callbacks::KeepBest best{dir / "best.pbin", {.metric = callbacks::Metric::val_accuracy}};
  auto const result = trainer.fit(
      train, {.epochs = 3,
              .batch_size = 96,
              .log_every = 5,
              .log = &log,
              .validation = &validation,
              .evaluate_each_epoch = true,
              .hooks = {callbacks::metrics_log(dir / "metrics.csv"),
                        callbacks::learning_rate_schedule(
                            callbacks::warm_up(5, callbacks::cosine(0.01f, 25))),
                        callbacks::early_stopping({.monitor = {.min_delta = 1e-3}, .patience = 2}),
                        best}});
  for (auto const& record : result.history) {
    if (record.kind == RecordKind::evaluation) {
      std::cout << "step " << record.global_step << ": accuracy " << *record.val_accuracy() << "\n";
    }
  }
  // example-end training-output
  CHECK(result.global_step == 30);
  CHECK(std::filesystem::exists(dir / "best.pbin"));
  CHECK(std::filesystem::exists(dir / "metrics.csv"));
  CHECK(result.history.front().lr == doctest::Approx(0.01f));  // warmed up by step 5
  CHECK(result.history.back().lr < 0.01f * 0.2f);              // near the end of the cosine
}

}  // namespace test_train_progress
