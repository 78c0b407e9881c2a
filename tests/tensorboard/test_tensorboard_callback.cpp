// callbacks::tensorboard in C++: a run read back record by record with read_record and the
// generated messages (file version first, tags at the history's steps); an asynchronous run
// writes the weights' histograms only and says why once; bad options and a log directory that is
// a file are refused before the first step. (TensorBoard's own reader: test_tensorboard_events.py.)
#include <doctest/doctest.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/tensorboard.hpp>
#include <convoy/train/trainer.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <vector>

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

std::vector<tensorboard::proto::Event> read_events(std::filesystem::path const& dir) {
  std::vector<std::filesystem::path> files;
  for (auto const& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) {
      files.push_back(entry.path());
    }
  }
  REQUIRE(files.size() == 1);
  std::ifstream in(files[0], std::ios::binary);
  std::vector<tensorboard::proto::Event> events;
  while (auto record = tensorboard::read_record(in, files[0].string())) {
    tensorboard::proto::Event event;
    REQUIRE(event.ParseFromString(*record));
    events.push_back(event);
  }
  return events;
}

// tag -> the steps it was written at, in order.
std::map<std::string, std::vector<std::int64_t>> steps_by_tag(
    std::vector<tensorboard::proto::Event> const& events) {
  std::map<std::string, std::vector<std::int64_t>> out;
  for (auto const& e : events) {
    for (auto const& v : e.summary().value()) out[v.tag()].push_back(e.step());
  }
  return out;
}

}  // namespace

TEST_CASE("a lock-step run: file version first, scalars per interval, histograms every N") {
  testing::TempDir dir("tensorboard-sync");
  using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Mirrored> trainer{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                            optim::Sgd{0.1f}};
  auto const logs = dir / "logs" / "run1";  // created when missing
  auto const result = trainer.fit(
      data, {.steps = 12,
             .batch_size = 96,
             .log_every = 4,
             .log = nullptr,
             .validation = &data,
             .evaluate_every = 6,
             .hooks = {callbacks::tensorboard(logs, {.histograms_every = 6})}});
  auto const events = read_events(logs);
  REQUIRE(!events.empty());
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].wall_time() > 1.6e9);
  auto const tags = steps_by_tag(events);
  std::vector<std::int64_t> const intervals{4, 8, 12};
  CHECK(tags.at("loss") == intervals);
  CHECK(tags.at("learning_rate") == intervals);
  CHECK(tags.at("validation/accuracy") == std::vector<std::int64_t>{6, 12});
  for (char const* name : {"mlp/layer1/kernel", "mlp/layer2/bias"}) {
    CHECK(tags.at(name) == std::vector<std::int64_t>{6, 12});
    CHECK(tags.at(std::string(name) + "/gradient") == std::vector<std::int64_t>{6, 12});
  }
  // The loss values are the history's interval means, as floats.
  std::vector<double> losses;
  for (auto const& r : result.history) {
    if (r.kind == RecordKind::interval) losses.push_back(*r.loss);
  }
  std::vector<double> written;
  for (auto const& e : events) {
    for (auto const& v : e.summary().value()) {
      if (v.tag() == "loss") written.push_back(v.simple_value());
    }
  }
  REQUIRE(written.size() == losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    CHECK(written[i] == doctest::Approx(losses[i]).epsilon(1e-6));
  }
}

TEST_CASE("an asynchronous run writes the weights' histograms only and says why once") {
  testing::TempDir dir("tensorboard-async");
  using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
  Trainer<Async> trainer{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                         optim::Sgd{0.1f}};
  std::ostringstream log;
  trainer.fit(data, {.steps = 20,
                     .batch_size = 96,
                     .log_every = 10,
                     .log = &log,
                     .hooks = {callbacks::tensorboard(dir.path, {.histograms_every = 5})}});
  auto const tags = steps_by_tag(read_events(dir.path));
  CHECK(tags.at("mlp/layer1/kernel").size() == 4);
  for (auto const& [tag, steps] : tags) CHECK_FALSE(tag.ends_with("/gradient"));
  std::string const text = log.str();
  auto const note = text.find("writes no gradient histograms");
  REQUIRE(note != std::string::npos);
  CHECK(text.find("writes no gradient histograms", note + 1) == std::string::npos);
}

TEST_CASE("bad options and a log directory that is a file are refused before the first step") {
  CHECK_THROWS_WITH_AS(callbacks::tensorboard("logs", {.histograms_every = -1}),
                       doctest::Contains("histograms_every >= 0"), Error);
  testing::TempDir dir("tensorboard-refused");
  std::ofstream(dir / "file") << "x";
  using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Mirrored> trainer{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 1}},
                            optim::Sgd{0.1f}};
  CHECK_THROWS_WITH_AS(
      trainer.fit(data, {.steps = 2, .log = nullptr, .hooks = {callbacks::tensorboard(dir / "file")}}),
      doctest::Contains("TensorBoard log directory"), Error);
  CHECK(trainer.strategy().global_step() == 0);
}
