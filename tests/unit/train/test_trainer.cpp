// ctest-labels: unit fault
// Trainer: progress lines in TensorFlow's shape, epochs, evaluation, and checkpoints: a run killed
// with SIGKILL and resumed from its last checkpoint ends bit-identical to an uninterrupted run.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <synthetic.hpp>
#include <temp_dir.hpp>

#include "../../../examples/common/linear_model.hpp"

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<Mirrored> make_trainer(optim::Optimizer opt = optim::Adam{0.01f}) {
  return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}}, opt};
}

std::vector<float> weights_of(Trainer<Mirrored>& t) {
  auto w = t.strategy().weights();
  return {w.begin(), w.end()};
}

}  // namespace

TEST_CASE("progress lines have the shape TensorFlow's examples print") {
  auto trainer = make_trainer();
  std::ostringstream log;
  auto result = trainer.fit(data, {.steps = 20, .batch_size = 96, .log_every = 10, .log = &log});
  CHECK(result.step == 20);
  CHECK(result.global_step == 40);
  std::string const text = log.str();
  CHECK(text.find("After 10 training steps (20 global steps), loss on training batch is ") !=
        std::string::npos);
  CHECK(text.find("After 20 training steps (40 global steps), loss on training batch is ") !=
        std::string::npos);
  CHECK(text.find(" sec/batch)") != std::string::npos);
  CHECK(text.find("After 5 training steps") == std::string::npos);
}

TEST_CASE("epochs become steps, and the trained model evaluates well") {
  auto trainer = make_trainer();
  auto result =
      trainer.fit(data, {.epochs = 3, .batch_size = 96, .log = nullptr, .validation = &data});
  CHECK(result.step == 30);  // 960 rows / 96 per step, three times
  REQUIRE(result.validation.has_value());
  CHECK(result.validation->count == 960);
  CHECK(result.validation->accuracy() > 0.9);
  CHECK(trainer.evaluate(data).accuracy() == doctest::Approx(result.validation->accuracy()));
}

TEST_CASE("a run killed after a checkpoint resumes to the same weights as an uninterrupted run") {
  testing::TempDir dir("resume");
  std::vector<float> uninterrupted;
  {
    auto trainer = make_trainer();
    trainer.fit(data, {.steps = 40, .batch_size = 96, .log = nullptr});
    uninterrupted = weights_of(trainer);
  }

  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the run that dies: checkpoints at 10 and 20, killed at 25
    auto trainer = make_trainer();
    Callback die = [](StepReport const& r) {
      if (r.step == 25) std::raise(SIGKILL);
      return true;
    };
    trainer.fit(data, {.steps = 40,
                       .batch_size = 96,
                       .log = nullptr,
                       .checkpoint_dir = dir.path,
                       .checkpoint_every = 10,
                       .callbacks = {die}});
    std::_Exit(0);  // never reached
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  auto const latest = io::latest_checkpoint(dir.path);
  REQUIRE(latest.has_value());
  CHECK(latest->filename().string().find("20") != std::string::npos);

  auto resumed = make_trainer();
  std::ostringstream log;
  auto result = resumed.fit(
      data,
      {.steps = 40, .batch_size = 96, .log_every = 0, .log = &log, .checkpoint_dir = dir.path});
  CHECK(log.str().find("resumed from") != std::string::npos);
  CHECK(log.str().find("at step 20") != std::string::npos);
  CHECK(result.step == 40);
  auto const after = weights_of(resumed);
  REQUIRE(after.size() == uninterrupted.size());
  CHECK(std::memcmp(after.data(), uninterrupted.data(), after.size() * sizeof(float)) == 0);
  CHECK(resumed.strategy().optimizer_state().updates == 40);
}

TEST_CASE("a checkpoint from another optimizer is refused by name") {
  testing::TempDir dir("other-optimizer");
  auto sgd = make_trainer(optim::Sgd{0.1f});
  sgd.fit(data, {.steps = 5, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  auto adam = make_trainer(optim::Adam{0.01f});
  CHECK_THROWS_WITH_AS(
      adam.fit(data, {.steps = 10, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path}),
      doctest::Contains("holds Sgd state but this run uses Adam"), CheckpointError);
}

TEST_CASE("a damaged latest checkpoint stops the run instead of silently starting over") {
  testing::TempDir dir("damaged");
  auto first = make_trainer();
  first.fit(data, {.steps = 5, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  auto const file = *io::latest_checkpoint(dir.path);
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  auto second = make_trainer();
  CHECK_THROWS_AS(
      second.fit(data, {.steps = 10, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path}),
      CheckpointError);
}

TEST_CASE("asynchronous training checkpoints consistent weights and counts global steps") {
  using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
  testing::TempDir dir("async");
  Trainer<Async> trainer{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                         optim::Sgd{0.1f}};
  std::ostringstream log;
  auto result = trainer.fit(data, {.steps = 60,
                                   .batch_size = 96,
                                   .log_every = 30,
                                   .log = &log,
                                   .checkpoint_dir = dir.path,
                                   .checkpoint_every = 20});
  CHECK(result.global_step == 60);
  CHECK(log.str().find("(60 global steps)") != std::string::npos);
  auto const ck = io::load_checkpoint(*io::latest_checkpoint(dir.path));
  CHECK(ck.state.counters.global_step == 60);
  CHECK(ck.state.counters.local_steps.size() == 2);
  CHECK(ck.state.counters.batches() == 60);
  // The checkpoint holds exactly the weights the strategy ended with.
  auto const& vars = trainer.model().variables();
  for (auto const& v : vars.list()) {
    auto const& t = ck.state.weights.at(v.name);
    CHECK(std::memcmp(t.data.data(), trainer.strategy().weights().data() + v.offset,
                      v.size * sizeof(float)) == 0);
  }
}

TEST_CASE("a model without evaluate trains through the Trainer, and refuses validation") {
  // examples::LinearModel has only what the Model concept asks: a non-const variables() and
  // forward_backward; no evaluate().
  using S = Strategy<examples::LinearModel, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<S> trainer{S{examples::LinearModel{}, place::Mirrored{.replicas = 2}}, optim::Sgd{0.5f}};
  auto const data = examples::fake_xy_data(1000, 3);
  trainer.fit(data, {.steps = 300, .batch_size = 100, .log = nullptr});
  auto const w = trainer.strategy().weights();
  CHECK(w[0] == doctest::Approx(0.1f).epsilon(0.02));
  CHECK(w[1] == doctest::Approx(0.3f).epsilon(0.02));
  CHECK_THROWS_WITH_AS(
      trainer.fit(data, {.steps = 310, .batch_size = 100, .log = nullptr, .validation = &data}),
      doctest::Contains("validation needs a model with"), Error);
}

TEST_CASE("epochs follow the sampler's epoch, synchronous and asynchronous") {
  auto const small = testing::synthetic_classes(1000, 12, 3);  // 3 whole batches of 300 an epoch
  auto sync_trainer = make_trainer();
  CHECK(sync_trainer.fit(small, {.epochs = 1, .batch_size = 300, .log = nullptr}).step == 3);
  using Async = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Asynchronous>;
  Trainer<Async> async_trainer{Async{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                               optim::Sgd{0.1f}};
  CHECK(async_trainer.fit(small, {.epochs = 2, .batch_size = 300, .log = nullptr}).global_step ==
        12);
}

TEST_CASE("fit refuses options that ask for no training, and data whose parts disagree") {
  auto trainer = make_trainer();
  CHECK_THROWS_WITH_AS(trainer.fit(data, {.log = nullptr}),
                       doctest::Contains("steps > 0 or epochs > 0"), Error);
  CHECK_THROWS_AS(trainer.fit(data, {.epochs = -1, .log = nullptr}), Error);
  auto broken = data;
  broken.labels.pop_back();
  CHECK_THROWS_WITH_AS(trainer.fit(broken, {.steps = 1, .log = nullptr}),
                       doctest::Contains("959 labels for 960 rows"), DatasetError);
}

TEST_CASE("evaluation from a callback of an asynchronous run reads the central weights") {
  using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
  Trainer<Async> trainer{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                         optim::Sgd{0.1f}};
  double accuracy = 0;
  Callback probe = [&](StepReport const& r) {
    if (r.global_step == 200) accuracy = trainer.evaluate(data).accuracy();
    return true;
  };
  trainer.fit(data, {.steps = 200, .batch_size = 96, .log = nullptr, .callbacks = {probe}});
  CHECK(accuracy > 0.9);
  CHECK(trainer.evaluate(data).accuracy() == doctest::Approx(accuracy));
}

TEST_CASE("late-gradient counts survive a checkpoint") {
  using namespace std::chrono_literals;
  using S = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  testing::TempDir dir("dropped");
  Trainer<S> first{S{nn::Mlp({12, 16, 3}),
                     place::Mirrored{.replicas = 3},
                     {},
                     sync::Synchronous{.replicas_to_aggregate = 2}},
                   optim::Sgd{0.1f}};
  first.fit(data, {.steps = 30, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  auto const dropped = first.strategy().dropped();
  Trainer<S> second{S{nn::Mlp({12, 16, 3}),
                      place::Mirrored{.replicas = 3},
                      {},
                      sync::Synchronous{.replicas_to_aggregate = 2}},
                    optim::Sgd{0.1f}};
  second.restore(*io::latest_checkpoint(dir.path));
  CHECK(second.strategy().dropped() == dropped);
  CHECK(second.strategy().step() == 30);
  CHECK(second.strategy().global_step() == 60);
}
