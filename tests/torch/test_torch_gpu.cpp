// libtorch::Model on a CUDA device: one replica under place::Gpu matches a plain LibTorch CUDA loop
// step for step (float32, BatchNorm's statistics included), its parameters and gradients are views
// of the arenas on the device and its work runs on the placement's stream, and a checkpoint written
// on the device resumes on the host and the other way round. Several replicas on the one GPU the
// lent machines have: place::CentralStorageGpus with two replicas on device 0, and two processes
// on it over comm::Gloo (started by this program, "--task gloo <dir>", each with its TF_CONFIG),
// each match one replica at twice the batch, as do two parameter-server workers on it ("--task
// ps <dir>": place::Sharded's worker_gpu). Built where convoy::cuda and a LibTorch with CUDA
// are (CI compiles and links it); without a device it says so and exits 77, which ctest reports
// as skipped.
// clang-format off
#include <torch_first.hpp>  // before doctest: LibTorch's glog defines CHECK
// clang-format on
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#if defined(CONVOY_WITH_GLOO)
#include <convoy/comm/gloo.hpp>
#endif
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/io/weights.hpp>
#include <convoy/strategy.hpp>
#include <convoy/torch/module_weights.hpp>
#include <convoy/train/trainer.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <processes.hpp>
#include <string>
#include <synthetic.hpp>
#include <task_checks.hpp>
#include <temp_dir.hpp>
#include <vector>

using namespace convoy;
namespace nn = ::torch::nn;

namespace {

constexpr std::int64_t side = 8;  // 1 x 8 x 8 images: 64 features
io::Dataset const data = testing::synthetic_classes(1024, side* side, 4);

// Two convolutions with BatchNorm, so that buffers travel too; without it, for replicas that
// must match one replica at their whole batch (each normalizes over its own rows).
nn::Sequential conv_net(bool batch_norm = true) {
  nn::Sequential net;
  net->push_back("conv1", nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)));
  if (batch_norm) net->push_back("bn1", nn::BatchNorm2d(8));
  net->push_back(nn::ReLU());
  net->push_back("conv2", nn::Conv2d(nn::Conv2dOptions(8, 8, 3).padding(1).stride(2)));
  if (batch_norm) net->push_back("bn2", nn::BatchNorm2d(8));
  net->push_back(nn::ReLU());
  net->push_back(nn::Flatten());
  net->push_back("fc", nn::Linear(8 * (side / 2) * (side / 2), 4));
  return net;
}

using Net = libtorch::Model<nn::Sequential>;
Net make_model(bool batch_norm = true) {
  ::torch::manual_seed(7);
  return Net([batch_norm] { return conv_net(batch_norm); }, {.row_shape = {1, side, side}});
}

using OnGpu = Strategy<Net, place::Gpu, comm::InProcess, sync::Synchronous>;
using OnHost = Strategy<Net, place::Host, comm::InProcess, sync::Synchronous>;

// ‖a − b‖ / ‖b‖ over every tensor of `b`.
double relative_error(std::map<std::string, Tensor> const& a,
                      std::map<std::string, Tensor> const& b) {
  double diff = 0.0, norm = 0.0;
  REQUIRE(a.size() == b.size());
  for (auto const& [name, t] : b) {
    auto const& u = a.at(name);
    REQUIRE(u.data.size() == t.data.size());
    for (std::size_t i = 0; i < t.data.size(); ++i) {
      diff += std::pow(static_cast<double>(u.data[i]) - t.data[i], 2);
      norm += std::pow(static_cast<double>(t.data[i]), 2);
    }
  }
  return std::sqrt(diff / norm);
}

RunPlan steps_until(std::int64_t until, std::size_t batch, std::vector<float>* losses) {
  RunPlan plan;
  plan.until = until;
  plan.batch = [batch](std::size_t, std::int64_t step) {
    return data.slice(static_cast<std::size_t>(step) * batch % (data.rows() - batch), batch);
  };
  plan.after_step = [losses](StepReport const& r) {
    losses->push_back(r.loss);
    return true;
  };
  return plan;
}

// The same convolution algorithms wherever two runs are compared, so that what differs is convoy.
void deterministic_cudnn() {
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

// `replicas` replicas, each on its rows of a step's `replicas` * `batch`, and one replica on all
// of them, take the same rows at every step.
RunPlan shared_steps(std::int64_t steps, std::size_t batch, std::size_t replicas) {
  RunPlan plan;
  plan.until = steps;
  plan.batch = [=](std::size_t replica, std::int64_t step) {
    auto const whole = batch * replicas;
    auto const first = static_cast<std::size_t>(step) * whole % (data.rows() - whole);
    return data.slice(first + replica * batch, batch);
  };
  return plan;
}
constexpr std::int64_t shared_step_count = 6;
constexpr std::size_t replica_batch = 32;
constexpr float shared_rate = 0.05f;

// One replica on the device at twice the batch: what two replicas must end with.
std::map<std::string, Tensor> one_replica_at_twice_the_batch() {
  deterministic_cudnn();
  OnGpu one{make_model(false), {.device = 0, .strict = true}};
  one.set_optimizer(optim::Sgd{.learning_rate = shared_rate});
  one.run(shared_steps(shared_step_count, 2 * replica_batch, 1));
  return one.get_weights();
}

#if defined(CONVOY_WITH_GLOO)
using OverGloo = Strategy<Net, place::Gpu, comm::Gloo, sync::Synchronous>;

// A worker of the two-process run: one replica on device 0, its buckets summed with the other
// process's through page-locked host memory and Gloo; each writes its final weights.
int gloo_task(std::filesystem::path const& dir) {
  deterministic_cudnn();
  OverGloo strategy{make_model(false),
                    {.device = 0, .strict = true},
                    // Buckets of 1 KiB: several, each handed in while the backward pass goes on.
                    comm::Gloo{.bucket_bytes = 1024, .timeout = std::chrono::seconds(30)},
                    sync::Synchronous{}};
  strategy.set_optimizer(optim::Sgd{.learning_rate = shared_rate});
  strategy.run(shared_steps(shared_step_count, replica_batch, 2));
  auto const rank = Cluster::from_environment(RankJobs::all_workers).worker_rank();
  io::save_named(dir / ("worker" + std::to_string(rank) + ".bin"), strategy.get_weights(),
                 io::Format::binary);
  return 0;
}
#endif

using OnPs = Strategy<Net, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;

// A task of the parameter-server run: a ps task serves, a worker trains one replica on device 0
// (worker 0 writes the weights the shards hold at the end).
int ps_task(std::filesystem::path const& dir) {
  deterministic_cudnn();
  OnPs strategy{make_model(false),
                {.worker_gpu = place::Gpu{.device = 0, .strict = true}},
                comm::ZmqPs{.connect_timeout = std::chrono::seconds(20)},
                sync::Synchronous{.timeout = std::chrono::seconds(30)}};
  strategy.set_optimizer(optim::Sgd{.learning_rate = shared_rate});
  auto const cluster = Cluster::from_environment();
  strategy.run(shared_steps(shared_step_count, replica_batch, 2));
  if (cluster.is_ps()) return 0;
  if (!strategy.model().net()->parameters().front().device().is_cuda()) {
    std::cerr << "the worker's module is on "
              << strategy.model().net()->parameters().front().device() << ", not the GPU\n";
    return 3;
  }
  if (cluster.worker_rank() == 0) {
    io::save_named(dir / "ps-worker0.bin", strategy.get_weights(), io::Format::binary);
  }
  return 0;
}

std::string program;

}  // namespace

TEST_CASE("one replica on the device matches a plain LibTorch CUDA loop step for step") {
  deterministic_cudnn();
  constexpr std::size_t batch = 32;
  constexpr float rate = 0.05f;
  OnGpu strategy{make_model(), {.device = 0, .strict = true}};
  strategy.set_optimizer(optim::Sgd{.learning_rate = rate});

  ::torch::manual_seed(7);
  auto plain = conv_net();
  plain->to(::torch::Device(::torch::kCUDA, 0));
  ::torch::optim::SGD sgd(plain->parameters(), ::torch::optim::SGDOptions(rate));
  REQUIRE(relative_error(strategy.get_weights(), libtorch::module_weights(*plain)) == 0.0);

  std::vector<float> losses;
  for (std::int64_t step = 0; step < 6; ++step) {
    CAPTURE(step);
    strategy.run(steps_until(step + 1, batch, &losses));
    REQUIRE(strategy.global_step() == step + 1);
    auto const b =
        data.slice(static_cast<std::size_t>(step) * batch % (data.rows() - batch), batch);
    auto const x = ::torch::from_blob(const_cast<float*>(b.features.data()),
                                      {static_cast<std::int64_t>(batch), 1, side, side})
                       .to(::torch::kCUDA);
    sgd.zero_grad();
    auto const loss = libtorch::cross_entropy(plain->forward(x), b);
    loss.backward();
    sgd.step();
    CHECK(losses.back() == doctest::Approx(loss.item<float>()).epsilon(1e-5));
    double const error = relative_error(strategy.get_weights(), libtorch::module_weights(*plain));
    MESSAGE("step " << step + 1 << ": loss " << losses.back() << ", weights' relative error "
                    << error);
    CHECK(error < 1e-5);
  }
  // The module the strategy's replica trains lives on the device, viewing the arenas there.
  auto const& replica = strategy.model();
  for (auto const& p : replica.net()->parameters()) CHECK(p.device().is_cuda());
  for (auto const& b : replica.net()->buffers()) CHECK(b.device().is_cuda());
  auto const first = replica.net()->parameters().front();
  CHECK(first.data_ptr<float>() == replica.variables().weights().data());
  CHECK(first.grad().data_ptr<float>() == replica.variables().grads().data());
  // ... which are device memory (cudaMalloc), not managed: the host reads them through copies.
  CHECK(replica.variables().arenas_on_device());
  for (float const* arena :
       {replica.variables().weights().data(), replica.variables().grads().data()}) {
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, arena) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeDevice);
  }
}

TEST_CASE("a checkpoint written on the device resumes on the host, and the other way round") {
  testing::TempDir dir("torch-gpu-checkpoint");
  FitOptions const options{.steps = 8, .batch_size = 32, .log_every = 0, .log = nullptr};
  auto const fit = [&]<class S>(S strategy, std::int64_t steps, std::string const& ckpt) {
    Trainer<S> trainer{std::move(strategy), optim::Momentum{0.05f, 0.9f}};
    FitOptions o = options;
    o.steps = steps;
    o.checkpoint_dir = ckpt;
    trainer.fit(data, o);
    return trainer.get_weights();
  };
  auto const gpu = [] { return OnGpu{make_model(), {.device = 0, .strict = true}}; };
  auto const host = [] { return OnHost{make_model()}; };

  auto const gpu_straight = fit(gpu(), 8, "");
  auto const host_straight = fit(host(), 8, "");
  // Host and device compute the same function to float32 rounding.
  double const across = relative_error(gpu_straight, host_straight);
  MESSAGE("8 steps on the device against 8 on the host: relative error " << across);
  CHECK(across < 1e-3);

  fit(gpu(), 4, (dir / "from_gpu").string());
  auto const on_host = fit(host(), 8, (dir / "from_gpu").string());
  CHECK(relative_error(on_host, gpu_straight) < 1e-3);
  CHECK(relative_error(on_host, host_straight) < 1e-3);

  fit(host(), 4, (dir / "from_host").string());
  auto const on_gpu = fit(gpu(), 8, (dir / "from_host").string());
  CHECK(relative_error(on_gpu, host_straight) < 1e-3);
}

TEST_CASE("the Trainer trains on the device and evaluates a copy on the host") {
  Trainer<OnGpu> trainer{OnGpu{make_model(), {.device = 0, .strict = true}},
                         optim::Momentum{0.05f, 0.9f}};
  auto const result =
      trainer.fit(data, {.epochs = 3, .batch_size = 32, .log_every = 0, .log = nullptr});
  auto const metrics = trainer.evaluate(data);
  MESSAGE("after 3 epochs: accuracy " << metrics.accuracy() << ", loss " << metrics.mean_loss());
  CHECK(metrics.accuracy() > 0.5);  // chance is 0.25
  CHECK(result.global_step == 3 * 1024 / 32);
}

TEST_CASE("mixed precision on the device: the forward pass in bfloat16, the weights in float32") {
  auto const trained = [](std::optional<::torch::ScalarType> autocast, ::torch::ScalarType* seen) {
    ::torch::manual_seed(7);
    Net model([] { return conv_net(); },
              {.row_shape = {1, side, side},
               .loss =
                   [seen](::torch::Tensor const& output, Batch const& batch) {
                     *seen = output.scalar_type();
                     return libtorch::cross_entropy(output.to(::torch::kFloat), batch);
                   },
               .autocast = autocast});
    OnGpu strategy{std::move(model), {.device = 0, .strict = true}};
    strategy.set_optimizer(optim::Sgd{.learning_rate = shared_rate});
    strategy.run(shared_steps(shared_step_count, replica_batch, 1));
    for (auto const& p : strategy.model().net()->parameters()) {
      CHECK(p.is_cuda());
      CHECK((p.scalar_type() == ::torch::kFloat));
      CHECK((p.grad().scalar_type() == ::torch::kFloat));
    }
    return strategy.get_weights();
  };
  ::torch::ScalarType plain_type = ::torch::kDouble, mixed_type = ::torch::kDouble;
  auto const plain = trained(std::nullopt, &plain_type);
  auto const mixed = trained(::torch::kBFloat16, &mixed_type);
  CHECK((plain_type == ::torch::kFloat));
  CHECK((mixed_type == ::torch::kBFloat16));
  double const error = relative_error(mixed, plain);
  MESSAGE("bfloat16 autocast against float32 on the device: relative error " << error);
  CHECK(error > 0.0);
  CHECK(error < 0.05);
}

TEST_CASE("two CentralStorageGpus replicas on one device match one replica at twice the batch") {
  auto const expected = one_replica_at_twice_the_batch();
  using Central = Strategy<Net, place::CentralStorageGpus, comm::InProcess, sync::Synchronous>;
  Central two{make_model(false), {.devices = {0, 0}, .strict = true}};
  two.set_optimizer(optim::Sgd{.learning_rate = shared_rate});
  two.run(shared_steps(shared_step_count, replica_batch, 2));
  double const error = relative_error(two.get_weights(), expected);
  MESSAGE("CentralStorageGpus{0, 0} against one replica: relative error " << error);
  CHECK(error < 1e-5);
  CHECK(two.model().net()->parameters().front().device().is_cuda());
}

#if defined(CONVOY_WITH_GLOO)
TEST_CASE("two processes on one GPU over comm::Gloo match one process at twice the batch") {
  auto const expected = one_replica_at_twice_the_batch();
  testing::TempDir dir("torch-gpu-gloo");
  auto const tasks =
      testing::run_cluster(program, "gloo", dir.path, 0, 2, {}, std::chrono::seconds(100));
  testing::check_tasks_succeeded(tasks);
  auto const first = io::load_named(dir / "worker0.bin", io::Format::binary);
  auto const second = io::load_named(dir / "worker1.bin", io::Format::binary);
  CHECK(relative_error(second, first) == 0.0);  // an allreduce leaves every replica the same
  double const error = relative_error(first, expected);
  MESSAGE("2 processes over Gloo against one replica: relative error " << error);
  CHECK(error < 1e-5);
}
#endif

TEST_CASE("two parameter-server workers on one GPU match one replica at twice the batch") {
  auto const expected = one_replica_at_twice_the_batch();
  testing::TempDir dir("torch-gpu-ps");
  auto const tasks =
      testing::run_cluster(program, "ps", dir.path, 1, 2, {}, std::chrono::seconds(100));
  testing::check_tasks_succeeded(tasks);
  double const error =
      relative_error(io::load_named(dir / "ps-worker0.bin", io::Format::binary), expected);
  MESSAGE("a ps and 2 GPU workers against one replica: relative error " << error);
  CHECK(error < 1e-4);  // the shards apply the mean on the host
}

int main(int argc, char** argv) {
  auto const task = [](std::string const& scenario, std::filesystem::path const& dir) {
    if (scenario == "ps") return ps_task(dir);
#if defined(CONVOY_WITH_GLOO)
    if (scenario == "gloo") return gloo_task(dir);
#endif
    return 2;
  };
  if (auto const status = testing::run_task_if_asked(argc, argv, task)) return *status;
  program = argv[0];
  if (exec::cuda::device_count() == 0 || !::torch::cuda::is_available()) {
    std::puts("test_torch_gpu: no CUDA device; skipped");
    return 77;
  }
  std::printf("test_torch_gpu: %s, LibTorch %s\n",
              exec::cuda::describe(exec::cuda::device_info(0)).c_str(), TORCH_VERSION);
  doctest::Context context(argc, argv);
  return context.run();
}
