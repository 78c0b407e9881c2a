// ctest-labels: unit fault
// Trainer: progress lines in TensorFlow's shape, epochs, evaluation, and checkpoints: a run killed
// with SIGKILL and resumed from its last checkpoint ends bit-identical to an uninterrupted run.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <csignal>
#include <cstring>
#include <fstream>
#include <helpers.hpp>
#include <random>
#include <sstream>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <thread>

#include "../../../examples/common/linear_model.hpp"

namespace test_train_trainer {

using namespace convoy;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);
using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

// An Mlp whose gradients carry a little noise drawn from its generator (as dropout would), so that
// a resumed run matches an uninterrupted one only if the generators were restored too.
struct NoisyMlp {
  nn::Mlp mlp{{12, 16, 3}};
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& b) {
    float const loss = mlp.forward_backward(b);
    std::normal_distribution<float> noise(0.0f, 1e-3f);
    for (float& g : mlp.variables().grads()) g += noise(mlp.variables().rng());
    return loss;
  }
  Metrics evaluate(Batch const& b) { return mlp.evaluate(b); }
};
using NoisyMirrored = Strategy<NoisyMlp, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<NoisyMirrored> make_noisy_trainer() {
  return Trainer<NoisyMirrored>{NoisyMirrored{NoisyMlp{}, place::Mirrored{.replicas = 2}},
                                optim::Adam{0.01f}};
}

// An Mlp that now and then sleeps a few milliseconds (as drawn from its replica's own generator),
// so that with replicas_to_aggregate < replicas some gradients surely come late.
struct SometimesSlowMlp {
  nn::Mlp mlp{{12, 16, 3}};
  Variables& variables() { return mlp.variables(); }
  float forward_backward(Batch const& b) {
    if (mlp.variables().rng()() % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(4));
    return mlp.forward_backward(b);
  }
};

Trainer<Mirrored> make_trainer(optim::Optimizer opt = optim::Adam{0.01f}) {
  return Trainer<Mirrored>{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}}, opt};
}

}  // namespace

TEST_CASE("LogFormat::tensorflow prints the lines of TensorFlow's examples") {
  auto trainer = make_trainer();
  std::ostringstream log;
  auto result = trainer.fit(data, {.steps = 20,
                                   .batch_size = 96,
                                   .log_every = 10,
                                   .log = &log,
                                   .log_format = LogFormat::tensorflow});
  CHECK(result.global_step == 20);
  CHECK(result.applied == 40);
  std::string const text = log.str();
  // TensorFlow's count: one global step per synchronous update, whatever the replica count.
  CHECK(text.find("After 10 training steps (10 global steps), loss on training batch is ") !=
        std::string::npos);
  CHECK(text.find("After 20 training steps (20 global steps), loss on training batch is ") !=
        std::string::npos);
  CHECK(text.find(" sec/batch)") != std::string::npos);
  CHECK(text.find("After 5 training steps") == std::string::npos);
}

TEST_CASE("epochs become steps, and the trained model evaluates well") {
  auto trainer = make_trainer();
  auto result =
      trainer.fit(data, {.epochs = 3, .batch_size = 96, .log = nullptr, .validation = &data});
  CHECK(result.global_step == 30);  // 960 rows / 96 per step, three times
  CHECK(result.epochs == doctest::Approx(3.0));
  REQUIRE(result.validation.has_value());
  CHECK(result.validation->count == 960);
  CHECK(result.validation->accuracy() > 0.9);
  // Checked against a model built apart from the Trainer, given the trained weights by name, and
  // against the untrained model, which must do much worse for the comparison to mean anything.
  nn::Mlp independent({12, 16, 3});
  CHECK(independent.evaluate(data.slice(0, data.rows())).accuracy() < 0.7);
  independent.variables().set_weights(trainer.get_weights());
  CHECK(independent.evaluate(data.slice(0, data.rows())).accuracy() ==
        doctest::Approx(result.validation->accuracy()));
}

TEST_CASE("a run killed after a checkpoint resumes to the same weights as an uninterrupted run") {
  testing::TempDir dir("resume");
  std::vector<float> uninterrupted;
  {
    auto trainer = make_noisy_trainer();
    trainer.fit(data, {.steps = 40, .batch_size = 96, .log = nullptr});
    uninterrupted = trainer.strategy().weights();
  }

  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the run that dies: checkpoints at 10 and 20, killed at 25
    auto trainer = make_noisy_trainer();
    Callback die = [](StepReport const& r) {
      if (r.global_step == 25) std::raise(SIGKILL);
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

  // Without the generators the noise differs, so the comparison below can see them restored.
  {
    auto ck = io::load_checkpoint(*latest);
    REQUIRE(ck.state.generators.size() == 2);
    ck.state.generators.clear();
    auto stripped = make_noisy_trainer();
    stripped.strategy().restore(ck.state);
    stripped.fit(data, {.steps = 40, .batch_size = 96, .log = nullptr, .seed = ck.data_seed});
    CHECK(stripped.strategy().weights() != uninterrupted);
  }

  auto resumed = make_noisy_trainer();
  std::ostringstream log;
  auto result = resumed.fit(
      data,
      {.steps = 40, .batch_size = 96, .log_every = 0, .log = &log, .checkpoint_dir = dir.path});
  CHECK(log.str().find("resumed from") != std::string::npos);
  CHECK(log.str().find("at global step 20") != std::string::npos);
  CHECK(result.global_step == 40);
  auto const after = resumed.strategy().weights();
  REQUIRE(after.size() == uninterrupted.size());
  CHECK(std::memcmp(after.data(), uninterrupted.data(), after.size() * sizeof(float)) == 0);
  CHECK(resumed.strategy().snapshot().optimizer_updates == 40);
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

namespace {
// Trains 20 steps into `dir` with a checkpoint every 10; returns the files of steps 20 and 10.
std::pair<std::filesystem::path, std::filesystem::path> two_checkpoints(
    std::filesystem::path const& dir) {
  auto first = make_trainer();
  first.fit(data, {.steps = 20,
                   .batch_size = 96,
                   .log = nullptr,
                   .checkpoint_dir = dir,
                   .checkpoint_every = 10});
  auto const older = dir / io::checkpoint_file_name(10);
  REQUIRE(std::filesystem::exists(older));
  return {dir / io::checkpoint_file_name(20), older};
}
}  // namespace

TEST_CASE("a damaged newest checkpoint falls back to the older one, with a warning naming both") {
  testing::TempDir dir("fallback");
  auto const files = two_checkpoints(dir.path);
  auto const& [newest, older] = files;
  std::filesystem::resize_file(newest, 0);  // an empty file, as a full disk leaves
  auto second = make_trainer();
  std::ostringstream log;
  auto const result =
      second.fit(data, {.steps = 30, .batch_size = 96, .log = &log, .checkpoint_dir = dir.path});
  auto const text = log.str();
  CHECK(text.find(newest.string()) != std::string::npos);
  CHECK(text.find(older.string()) != std::string::npos);
  CHECK(text.find("at global step 10") != std::string::npos);
  CHECK(result.global_step == 30);
}

TEST_CASE(
    "a newest checkpoint that reads well but does not fit the model falls back to the older one") {
  testing::TempDir dir("reshaped");
  auto const files = two_checkpoints(dir.path);
  auto const& [newest, older] = files;
  // One variable and its slots reshaped alike (the same values, transposed shape), written again
  // by save_checkpoint, so its checksum is right: the file reads well.
  auto reshaped = io::load_checkpoint(newest);
  auto const matrix = std::ranges::find_if(reshaped.state.weights, [](auto const& w) {
    return w.second.shape.size() == 2 && w.second.shape[0] != w.second.shape[1];
  });
  REQUIRE(matrix != reshaped.state.weights.end());
  auto& [name, weight] = *matrix;
  Shape const turned{weight.shape[1], weight.shape[0]};
  weight.shape = turned;
  for (auto& [slot, tensor] : reshaped.state.slots) {
    if (slot.starts_with(name + "/")) tensor.shape = turned;
  }
  std::filesystem::remove(newest);
  io::save_checkpoint(dir.path, reshaped);
  REQUIRE(std::filesystem::exists(newest));
  CHECK_NOTHROW(io::load_checkpoint(newest));
  auto second = make_trainer();
  std::ostringstream log;
  auto const result =
      second.fit(data, {.steps = 30, .batch_size = 96, .log = &log, .checkpoint_dir = dir.path});
  auto const text = log.str();
  CHECK_MESSAGE(text.find(newest.string()) != std::string::npos, text);
  CHECK(text.find("falling back to the older checkpoint '" + older.string() + "'") !=
        std::string::npos);
  CHECK(text.find("at global step 10") != std::string::npos);
  CHECK(result.global_step == 30);
  // With no older checkpoint that fits either, the run stops naming the newest and why.
  std::filesystem::remove(older);
  std::filesystem::remove(dir / io::checkpoint_file_name(30));
  auto third = make_trainer();
  CHECK_THROWS_WITH_AS(
      third.fit(data, {.steps = 40, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path}),
      doctest::Contains(newest.string().c_str()), CheckpointError);
}

TEST_CASE("a checkpoint directory that cannot be written is refused before the first step") {
  testing::TempDir dir("unwritable");
  testing::write_file(dir / "plain-file", "x");
  auto trainer = make_trainer();
  int steps = 0;
  Callback count = [&](StepReport const&) { return ++steps > 0; };
  CHECK_THROWS_WITH_AS(trainer.fit(data, {.steps = 5,
                                          .batch_size = 96,
                                          .log = nullptr,
                                          .checkpoint_dir = dir / "plain-file" / "ckpt",
                                          .callbacks = {count}}),
                       doctest::Contains("checkpoint directory"), Error);
  CHECK(steps == 0);
}

TEST_CASE("a temporary file left by a killed checkpoint writer is removed at the next start") {
  testing::TempDir dir("stale");
  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) std::_Exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);  // a pid that is surely dead now
  auto const stale =
      dir / (io::checkpoint_file_name(10) + ".tmp-" + std::to_string(static_cast<long>(child)));
  testing::write_file(stale, "half a checkpoint");
  auto trainer = make_trainer();
  trainer.fit(data, {.steps = 2, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  CHECK_FALSE(std::filesystem::exists(stale));
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
                                   .log_format = LogFormat::tensorflow,
                                   .checkpoint_dir = dir.path,
                                   .checkpoint_every = 20});
  CHECK(result.global_step == 60);
  CHECK(log.str().find("(60 global steps)") != std::string::npos);
  auto const ck = io::load_checkpoint(*io::latest_checkpoint(dir.path));
  CHECK(ck.state.counters.global_step == 60);
  CHECK(ck.state.counters.local_steps.size() == 2);
  CHECK(ck.state.counters.batches() == 60);
  // The checkpoint holds exactly the weights the strategy ended with.
  CHECK(ck.state.weights == trainer.get_weights());
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
  CHECK(sync_trainer.fit(small, {.epochs = 1, .batch_size = 300, .log = nullptr}).global_step == 3);
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
  // Global step 200 is the last update, so the callback saw the final central weights: a model
  // built apart from the Trainer and given them by name scores the same.
  nn::Mlp independent({12, 16, 3});
  independent.variables().set_weights(trainer.get_weights());
  CHECK(independent.evaluate(data.slice(0, data.rows())).accuracy() == doctest::Approx(accuracy));
}

TEST_CASE("late-gradient counts survive a checkpoint, and an M-of-N run resumes") {
  using S = Strategy<SometimesSlowMlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  auto make = [] {
    return Trainer<S>{S{SometimesSlowMlp{},
                        place::Mirrored{.replicas = 3},
                        {},
                        sync::Synchronous{.replicas_to_aggregate = 2}},
                      optim::Sgd{0.1f}};
  };
  testing::TempDir dir("dropped");
  auto first = make();
  first.fit(data, {.steps = 30, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  auto const counters = first.strategy().counters();
  REQUIRE(counters.dropped > 0);  // or the comparisons below would prove nothing
  CHECK(counters.applied == 60);  // two gradients per update
  auto second = make();
  second.restore(*io::latest_checkpoint(dir.path));
  CHECK(second.strategy().counters() == counters);
  auto const result =
      second.fit(data, {.steps = 50, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  CHECK(result.global_step == 50);
  CHECK(result.applied == 100);
  CHECK(result.dropped >= counters.dropped);
}

TEST_CASE("an asynchronous run resumes from its checkpoint and keeps counting global steps") {
  using Async = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Asynchronous>;
  auto make = [] {
    return Trainer<Async>{Async{nn::Mlp({12, 16, 3}), place::CentralStorage{.replicas = 2}},
                          optim::Momentum{0.05f, 0.9f}};
  };
  testing::TempDir dir("async-resume");
  auto first = make();
  first.fit(data, {.steps = 30, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  auto const saved = first.strategy().snapshot();
  auto second = make();
  std::ostringstream log;
  auto const result =
      second.fit(data, {.steps = 70, .batch_size = 96, .log = &log, .checkpoint_dir = dir.path});
  CHECK(log.str().find("resumed from") != std::string::npos);
  CHECK(result.global_step == 70);
  CHECK(result.applied == 70);
  CHECK(second.strategy().counters().batches() == 70);
  CHECK(second.strategy().snapshot().optimizer_updates == 70);
  // The resumed run started from the saved weights: they differ from a fresh model's.
  CHECK(saved.weights != make().get_weights());
  CHECK(second.evaluate(data).accuracy() > 0.9);
}

TEST_CASE("resumed with another replica count, steps and epochs carry on") {
  testing::TempDir dir("replica-count");
  Trainer<Mirrored> three{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 3}},
                          optim::Sgd{0.1f}};
  three.fit(data, {.epochs = 1, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  CHECK(three.strategy().global_step() == 10);
  auto two = make_trainer(optim::Sgd{0.1f});
  auto const result =
      two.fit(data, {.epochs = 2, .batch_size = 96, .log = nullptr, .checkpoint_dir = dir.path});
  CHECK(result.global_step == 20);  // 10 more global steps make the second epoch
  CHECK(result.epochs == doctest::Approx(2.0));
}

TEST_CASE("Trainer writes weights by name into every replica, and reads them back") {
  testing::TempDir dir("weights");
  auto trained = make_trainer();
  trained.fit(data, {.steps = 30, .batch_size = 96, .log = nullptr});
  trained.save_weights(dir / "w.pbin");
  auto fresh = make_trainer();
  fresh.load_weights(dir / "w.pbin");
  auto& group = fresh.strategy().engine().state();
  for (std::size_t r = 0; r < group.size(); ++r) {
    CHECK(std::ranges::equal(group.replica(r).variables().weights(), trained.strategy().weights()));
  }
  CHECK(fresh.evaluate(data).accuracy() == doctest::Approx(trained.evaluate(data).accuracy()));
  CHECK_THROWS_AS(fresh.evaluate(data, 0), Error);
  CHECK_THROWS_AS(fresh.load_weights(dir / "missing.pbin"), Error);
}

}  // namespace test_train_trainer
