// A LibTorch model on a parameter-server cluster of real processes on loopback: 2 synchronous
// workers on 1 and 2 shards match in-process Mirrored with 2 replicas step for step, BatchNorm's
// running statistics included (the shards apply their change, not the optimizer); workers asked to
// compute on a GPU (place::Sharded's worker_gpu) where the model or the build cannot fall back to
// the host, each saying why, and train the same. The program starts itself once per task
// ("--task <scenario> <dir>") with its TF_CONFIG.
#include "torch_first.hpp"  // before doctest: LibTorch's glog defines CHECK

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "files.hpp"
#include "processes.hpp"
#include "synthetic.hpp"
#include "task_checks.hpp"
#include "temp_dir.hpp"

namespace {

using namespace convoy;
namespace tnn = torch::nn;  // not nn: convoy::nn is in scope

constexpr std::int64_t steps = 12;
constexpr std::size_t batch_size = 32;
constexpr std::int64_t side = 4;

io::Dataset data() { return testing::synthetic_classes(384, side * side, 3); }

using Model = libtorch::Model<tnn::Sequential>;
Model make_model() {
  torch::manual_seed(5);
  return Model(
      [] {
        return tnn::Sequential(tnn::Conv2d(tnn::Conv2dOptions(1, 4, 3).padding(1)),
                               tnn::BatchNorm2d(4), tnn::ReLU(), tnn::Flatten(),
                               tnn::Linear(4 * side * side, 3));
      },
      {.row_shape = {1, side, side}});
}
optim::Optimizer optimizer() { return optim::Adam{.learning_rate = 0.01f}; }

// Losses of every step and the final weights by name, as text.
void write_result(std::filesystem::path const& file, std::vector<float> const& losses,
                  std::map<std::string, Tensor> const& weights) {
  std::ofstream out(file);
  out.precision(9);
  out << losses.size();
  for (float l : losses) out << " " << l;
  out << "\n" << weights.size() << "\n";
  for (auto const& [name, t] : weights) {
    out << name << " " << t.data.size();
    for (float v : t.data) out << " " << v;
    out << "\n";
  }
}

struct Result {
  std::vector<float> losses;
  std::map<std::string, std::vector<float>> weights;
};
Result read_result(std::filesystem::path const& file) {
  Result r;
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "no " << file);
  std::size_t n = 0;
  in >> n;
  r.losses.resize(n);
  for (auto& l : r.losses) in >> l;
  in >> n;
  for (std::size_t i = 0; i < n; ++i) {
    std::string name;
    std::size_t size = 0;
    in >> name >> size;
    auto& values = r.weights[name];
    values.resize(size);
    for (auto& v : values) in >> v;
  }
  return r;
}

template <class Trainer>
std::vector<float> fit(Trainer& trainer) {
  std::vector<float> losses;
  trainer.fit(data(), {.steps = steps,
                       .batch_size = batch_size,
                       .log = nullptr,
                       .callbacks = {[&](StepReport const& r) {
                         losses.push_back(r.loss);
                         return true;
                       }}});
  return losses;
}

int task(std::string const& scenario, std::filesystem::path const& dir) {
  if (scenario != "sync" && scenario != "sync-on-gpu") return 2;
  using S = Strategy<Model, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
  auto const cluster = Cluster::from_environment();
  place::Sharded<> placement;
  if (scenario == "sync-on-gpu") placement.worker_gpu = place::Gpu{.device = 0};
  Trainer<S> trainer{
      S{make_model(), placement, comm::ZmqPs{.connect_timeout = std::chrono::seconds(20)},
        sync::Synchronous{.timeout = std::chrono::milliseconds(30000)}},
      optimizer()};
  auto const losses = fit(trainer);
  if (cluster.worker_rank() == 0) write_result(dir / "chief.txt", losses, trainer.get_weights());
  return 0;
}

std::string program;

}  // namespace

TEST_CASE("a LibTorch model: synchronous PS with 2 workers matches Mirrored, buffers included") {
  using Reference = Strategy<Model, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Reference> mirrored{Reference{make_model(), {.replicas = 2}}, optimizer()};
  auto const expected = fit(mirrored);
  auto const expected_weights = mirrored.get_weights();
  REQUIRE(expected_weights.contains("1.running_mean"));

  for (auto [shards, scenario] : {std::pair{1, "sync"}, {2, "sync"}, {1, "sync-on-gpu"}}) {
    CAPTURE(shards);
    CAPTURE(scenario);
    testing::TempDir dir("torch-ps");
    auto const tasks = testing::run_cluster(program, scenario, dir.path, shards, 2);
    testing::check_tasks_succeeded(tasks);
    if (std::string_view(scenario) == "sync-on-gpu") {
      // Each worker says once why it computes on the host; a ps task opens no device.
      for (auto const& t : tasks) {
        auto const log = testing::read_file(t.log);
        CAPTURE(log);
        bool const said = log.find(
                              "place::Gpu{device 0} cannot be honoured: libtorch::Model "
                              "computes on the host") != std::string::npos;
        CHECK(said == (t.job == "worker"));
      }
    }
    auto const chief = read_result(dir / "chief.txt");
    REQUIRE(chief.losses.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CHECK(chief.losses[i] == doctest::Approx(expected[i]).epsilon(1e-4));
    }
    REQUIRE(chief.weights.size() == expected_weights.size());
    for (auto const& [name, t] : expected_weights) {
      CAPTURE(name);
      auto const& got = chief.weights.at(name);
      REQUIRE(got.size() == t.data.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i] == doctest::Approx(t.data[i]).epsilon(1e-3));
      }
    }
    CHECK(chief.weights.at("1.num_batches_tracked")[0] == static_cast<float>(steps));
  }
}

int main(int argc, char** argv) {
  if (auto const status = convoy::testing::run_task_if_asked(argc, argv, task)) return *status;
  program = argv[0];
  doctest::Context context(argc, argv);
  return context.run();
}
