// ctest-labels: unit fault
// metrics_log: CSV and JSON lines with the fixed columns, one row per interval and evaluation,
// absent values empty or null, flushed per row (a run killed with SIGKILL leaves whole rows), and
// its path refused before the first step.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/metrics_log.hpp>
#include <convoy/train/trainer.hpp>
#include <csignal>
#include <helpers.hpp>
#include <sstream>
#include <string>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <vector>

namespace test_train_metrics_log {

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<Mirrored> make_trainer() {
  return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                           optim::Sgd{0.1f}};
}

std::vector<std::string> split(std::string const& text, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!text.empty() && text.back() == separator && separator != '\n') parts.emplace_back();
  return parts;
}

FitOptions options_with(Hooks hooks) {
  return {.steps = 20,
          .batch_size = 96,
          .log_every = 5,
          .log = nullptr,
          .validation = &data,
          .evaluate_every = 10,
          .hooks = {std::move(hooks)}};
}

}  // namespace

TEST_CASE("a record becomes a CSV row and a JSON line, absent values empty and null") {
  HistoryRecord interval;
  interval.epoch = 2;
  interval.global_step = 15;
  interval.elapsed_s = 1.5;
  interval.loss = 0.25;
  interval.samples_per_s = 1000;
  interval.lr = 0.125f;
  CHECK(callbacks::csv_row(interval) == "2,15,1.5,0.25,1000,0.125,,");
  CHECK(callbacks::json_line(interval) ==
        R"({"epoch": 2, "global_step": 15, "elapsed_s": 1.5, "loss": 0.25, "samples_per_s": 1000, )"
        R"("lr": 0.125, "val_loss": null, "val_accuracy": null})");
  HistoryRecord evaluation;
  evaluation.kind = RecordKind::evaluation;
  evaluation.global_step = 20;
  evaluation.elapsed_s = 2;
  evaluation.lr = 0.5f;
  evaluation.validation = Metrics{.loss_sum = 3.0, .correct = 3, .count = 4};
  CHECK(callbacks::csv_row(evaluation) == "1,20,2,,,0.5,0.75,0.75");
  CHECK(callbacks::json_line(evaluation).ends_with(R"("val_loss": 0.75, "val_accuracy": 0.75})"));
}

TEST_CASE("the CSV log has the header and one row per record of the history") {
  testing::TempDir dir("metrics-csv");
  auto trainer = make_trainer();
  auto const result = trainer.fit(data, options_with(callbacks::metrics_log(dir / "m.csv")));
  auto const lines = split(testing::read_file(dir / "m.csv"), '\n');
  REQUIRE(lines.size() == result.history.size() + 1);
  CHECK(lines[0] == "epoch,global_step,elapsed_s,loss,samples_per_s,lr,val_loss,val_accuracy");
  // Intervals at 5, 10, 15, 20; evaluations at 10 and 20 (the final one not repeated).
  REQUIRE(result.history.size() == 6);
  for (std::size_t i = 0; i < result.history.size(); ++i) {
    auto const& r = result.history[i];
    auto const fields = split(lines[i + 1], ',');
    REQUIRE(fields.size() == 8);
    CHECK(std::stoll(fields[1]) == r.global_step);
    CHECK(std::stod(fields[5]) == doctest::Approx(0.1));
    if (r.kind == RecordKind::interval) {
      CHECK(std::stod(fields[3]) == doctest::Approx(*r.loss));
      CHECK(fields[6].empty());
      CHECK(fields[7].empty());
    } else {
      CHECK(fields[3].empty());
      CHECK(fields[4].empty());
      CHECK(std::stod(fields[7]) == doctest::Approx(r.validation->accuracy()));
    }
  }
}

TEST_CASE("the JSON-lines log has one object per record, with every key in order") {
  testing::TempDir dir("metrics-jsonl");
  auto trainer = make_trainer();
  auto const result = trainer.fit(data, options_with(callbacks::metrics_log(dir / "m.jsonl")));
  auto const lines = split(testing::read_file(dir / "m.jsonl"), '\n');
  REQUIRE(lines.size() == result.history.size());
  std::vector<std::string> const keys{"epoch",         "global_step", "elapsed_s", "loss",
                                      "samples_per_s", "lr",          "val_loss",  "val_accuracy"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::size_t at = 0;
    for (auto const& key : keys) {
      auto const next = lines[i].find("\"" + key + "\": ", at);
      REQUIRE_MESSAGE(next != std::string::npos, lines[i]);
      at = next;
    }
    bool const evaluation = result.history[i].kind == RecordKind::evaluation;
    CHECK((lines[i].find("\"loss\": null") != std::string::npos) == evaluation);
    CHECK((lines[i].find("\"val_loss\": null") != std::string::npos) == !evaluation);
  }
}

TEST_CASE("a run killed mid-way leaves a log of whole rows") {
  testing::TempDir dir("metrics-killed");
  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto trainer = make_trainer();
    trainer.fit(data, {.steps = 40,
                       .batch_size = 96,
                       .log_every = 5,
                       .log = nullptr,
                       .callbacks = {[](StepReport const& r) {
                         if (r.global_step == 17) std::raise(SIGKILL);
                         return true;
                       }},
                       .hooks = {callbacks::metrics_log(dir / "m.csv")}});
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  auto const text = testing::read_file(dir / "m.csv");
  REQUIRE(text.ends_with("\n"));
  auto const lines = split(text, '\n');
  REQUIRE(lines.size() == 4);  // the header and the intervals ending at 5, 10 and 15
  CHECK(lines[3].starts_with("2,15,"));
  for (auto const& line : lines) CHECK(split(line, ',').size() == 8);
}

TEST_CASE("a metrics path that cannot be written is refused, by name, before the first step") {
  testing::TempDir dir("metrics-refused");
  int steps = 0;
  Callback count = [&](StepReport const&) { return ++steps > 0; };
  auto trainer = make_trainer();
  auto const missing = dir / "no-such-dir" / "m.csv";
  CHECK_THROWS_WITH_AS(
      trainer.fit(data, {.steps = 5,
                         .batch_size = 96,
                         .log = nullptr,
                         .callbacks = {count},
                         .hooks = {callbacks::metrics_log(missing)}}),
      doctest::Contains(doctest::String(("metrics log '" + missing.string() + "'").c_str())),
      Error);
  CHECK(steps == 0);
  CHECK_THROWS_WITH_AS(callbacks::metrics_log(dir / "m.txt"),
                       doctest::Contains(doctest::String(((dir / "m.txt").string()).c_str())),
                       Error);
  // Given explicitly, any name will do.
  auto const named = dir / "m.txt";
  trainer.fit(data, {.steps = 5,
                     .batch_size = 96,
                     .log = nullptr,
                     .hooks = {callbacks::metrics_log(named, callbacks::MetricsFormat::csv)}});
  CHECK(testing::read_file(named).starts_with("epoch,global_step,"));
}

}  // namespace test_train_metrics_log
