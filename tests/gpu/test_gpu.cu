// ctest-labels: gpu
// The device backend. Suite "device" (ctest test_gpu, label gpu): every device math function, layer,
// loss and optimizer against the host on fresh random inputs (normwise relative error under 1e-5
// in float32), and training of the MLP on the device matching the host step for step; without a
// CUDA device the program says so and exits 77, which ctest reports as skipped. Suite "placement"
// (ctest test_gpu_placement, label unit, `test_gpu --placement`): place::Gpu in a CUDA build on
// whatever machine runs it: the fallback and strict lines without a device, a strategy trained
// through it matching place::Host (on the host after a fallback, on the device where there is
// one), and the error of a call on a device that is not there.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <convoy/comm/nccl.hpp>  // with convoy::nccl (CONVOY_WITH_NCCL), comm::Nccl's engine
#include <convoy/exec/cuda.hpp>
#include <convoy/math/cuda.cuh>
#include <convoy/nn/mlp.hpp>
#include <convoy/optim/optimizer.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory_resource>
#include <random>
#include <sstream>
#include <span>
#include <string>
#include <vector>
#include <synthetic.hpp>

using namespace convoy;

namespace {

// Fresh inputs on every run; the seed is printed so that a failure can be replayed.
std::uint64_t const seed = std::random_device{}();

std::vector<float> random_floats(std::size_t n, std::uint64_t salt) {
  std::mt19937_64 engine(seed + salt);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> out(n);
  for (float& x : out) x = uniform(engine);
  return out;
}

// ||got - want|| / ||want||, over two host-readable ranges.
double relative_error(std::span<float const> got, std::span<float const> want) {
  REQUIRE(got.size() == want.size());
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// A copy of `values` in the context's (managed) memory.
std::pmr::vector<float> on_device(exec::Cuda const& gpu, std::vector<float> const& values) {
  return std::pmr::vector<float>(values.begin(), values.end(), gpu.memory());
}

constexpr double tolerance = 1e-5;

struct Square {
  float const* p;
  CONVOY_HOST_DEVICE double operator()(std::size_t i) const { return static_cast<double>(p[i]) * p[i]; }
};

}  // namespace

TEST_SUITE_BEGIN("device");

TEST_CASE("gemm through cuBLAS matches CBLAS in all four transpositions") {
  exec::Cuda const gpu(0);
  auto const scope = gpu.enter();
  std::size_t const m = 100, n = 128, k = 784;  // the Fashion-MNIST MLP's first layer at batch 100
  for (int flags = 0; flags < 4; ++flags) {
    bool const ta = (flags & 1) != 0, tb = (flags & 2) != 0;
    CAPTURE(ta);
    CAPTURE(tb);
    auto const a = random_floats(m * k, 1 + flags), b = random_floats(k * n, 11 + flags);
    auto const c0 = random_floats(m * n, 21 + flags);
    std::vector<float> want = c0;
    math::gemm(exec::Host{}, ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.25f, want.data());
    auto const da = on_device(gpu, a), db = on_device(gpu, b);
    auto got = on_device(gpu, c0);
    math::gemm(gpu, ta, tb, m, n, k, 0.5f, da.data(), db.data(), 0.25f, got.data());
    gpu.synchronize();
    CHECK(relative_error(got, want) < tolerance);
  }
}

TEST_CASE("for_each_index and sum_over_indices match the host") {
  exec::Cuda const gpu(0);
  auto const scope = gpu.enter();
  std::size_t const n = 1'000'003;  // not a multiple of any block size
  auto const x = random_floats(n, 31);
  std::vector<float> want(n);
  float const* hx = x.data();
  float* hy = want.data();
  math::for_each_index(exec::Host{}, n, [=] CONVOY_HOST_DEVICE(std::size_t i) { hy[i] = 2.0f * hx[i] + 1.0f; });
  auto const dx = on_device(gpu, x);
  std::pmr::vector<float> got(n, gpu.memory());
  float const* px = dx.data();
  float* py = got.data();
  math::for_each_index(gpu, n, [=] CONVOY_HOST_DEVICE(std::size_t i) { py[i] = 2.0f * px[i] + 1.0f; });
  gpu.synchronize();
  CHECK(relative_error(got, want) < tolerance);

  double const host = math::sum_over_indices(exec::Host{}, n, Square{hx});
  double const device = math::sum_over_indices(gpu, n, Square{px});
  CHECK(std::abs(device - host) / host < tolerance);
  CHECK(math::sum_over_indices(gpu, 0, Square{px}) == 0.0);
}

TEST_CASE("Dense, ReLU and softmax cross-entropy on the device match the host") {
  exec::Cuda const gpu(0);
  auto const scope = gpu.enter();
  std::size_t const rows = 100, inputs = 784, outputs = 10;
  Variables host_vars("dense", seed);
  nn::Dense const layer(host_vars, "layer", inputs, outputs);
  Variables device_vars = host_vars;
  gpu.adopt(device_vars);
  auto const x = random_floats(rows * inputs, 41);
  auto const dx_x = on_device(gpu, x);

  std::vector<float> y(rows * outputs);
  layer.forward(exec::Host{}, host_vars, x, rows, y);
  nn::relu_forward(exec::Host{}, y);
  std::pmr::vector<float> dy(rows * outputs, gpu.memory());
  layer.forward(gpu, device_vars, dx_x, rows, dy);
  nn::relu_forward(gpu, dy);
  gpu.synchronize();
  CHECK(relative_error(dy, y) < tolerance);

  std::vector<std::int32_t> labels(rows);
  for (std::size_t r = 0; r < rows; ++r) labels[r] = static_cast<std::int32_t>((r * 7 + seed) % outputs);
  std::pmr::vector<std::int32_t> const device_labels(labels.begin(), labels.end(), gpu.memory());
  std::vector<float> grad(rows * outputs);
  std::pmr::vector<float> device_grad(rows * outputs, gpu.memory());
  float const host_loss = nn::softmax_cross_entropy(exec::Host{}, y, labels, rows, outputs, grad);
  float const device_loss =
      nn::softmax_cross_entropy(gpu, dy, device_labels, rows, outputs, device_grad);
  CHECK(std::abs(device_loss - host_loss) / host_loss < tolerance);
  auto const host_metrics = nn::softmax_cross_entropy_metrics(exec::Host{}, y, labels, rows, outputs);
  auto const device_metrics = nn::softmax_cross_entropy_metrics(gpu, dy, device_labels, rows, outputs);
  CHECK(device_metrics.correct == host_metrics.correct);
  CHECK(std::abs(device_metrics.loss_sum - host_metrics.loss_sum) / host_metrics.loss_sum < tolerance);

  nn::relu_backward(exec::Host{}, y, grad);
  nn::relu_backward(gpu, dy, device_grad);
  std::vector<float> dx(rows * inputs);
  std::pmr::vector<float> device_dx(rows * inputs, gpu.memory());
  layer.backward(exec::Host{}, host_vars, x, grad, rows, dx);
  layer.backward(gpu, device_vars, dx_x, device_grad, rows, device_dx);
  gpu.synchronize();
  CHECK(relative_error(device_grad, grad) < tolerance);
  CHECK(relative_error(device_dx, dx) < tolerance);
  // The arenas are device memory: the host reads them through the set's copies.
  REQUIRE(device_vars.arenas_on_device());
  CHECK(!exec::Cuda::host_addressable(device_vars.grads().data()));
  auto const device_grads = device_vars.to_host(device_vars.grads());
  auto const grad_of = [&](VariableId id) {
    auto const& variable = device_vars[id];
    return std::span<float const>(device_grads).subspan(variable.offset, variable.size);
  };
  CHECK(relative_error(grad_of(layer.kernel()), host_vars.grad(layer.kernel())) < tolerance);
  CHECK(relative_error(grad_of(layer.bias()), host_vars.grad(layer.bias())) < tolerance);
  CHECK(device_vars.get_flat() == host_vars.get_flat());  // adopt copied the weights there
}

TEST_CASE("Sgd, Momentum and Adam updates on the device match the host") {
  exec::Cuda const gpu(0);
  auto const scope = gpu.enter();
  std::size_t const n = 397'510;  // the Fashion-MNIST MLP's arena (784-500-10... and a few more)
  auto const w0 = random_floats(n, 51), g = random_floats(n, 52);
  auto const apply = [&](auto const& optimizer, auto const& ctx, float* w, float const* grads,
                         float* m, float* v) {
    for (std::int64_t step = 1; step <= 3; ++step) {
      optim::Update u{{w, n}, {grads, n}, {m, v}, 0.5f, step};
      optimizer.apply(ctx, u);
    }
  };
  auto const check = [&](auto const& optimizer) {
    INFO(std::string(optimizer.name));
    std::vector<float> w = w0, m(n, 0.0f), v(n, 0.0f);
    apply(optimizer, exec::Host{}, w.data(), g.data(), m.data(), v.data());
    auto dw = on_device(gpu, w0), dg = on_device(gpu, g);
    std::pmr::vector<float> dm(n, 0.0f, gpu.memory()), dv(n, 0.0f, gpu.memory());
    apply(optimizer, gpu, dw.data(), dg.data(), dm.data(), dv.data());
    gpu.synchronize();
    CHECK(relative_error(dw, w) < tolerance);
    CHECK(relative_error(dm, m) < tolerance);
  };
  check(optim::Sgd{0.1f});
  check(optim::Momentum{0.1f, 0.9f});
  check(optim::Adam{0.01f});
}

TEST_CASE("synchronous training of the MLP on the device matches the host step for step") {
  exec::Cuda const gpu(0);
  auto const scope = gpu.enter();
  std::size_t const rows = 64, features = 784, classes = 10, steps = 30;
  auto const data = testing::synthetic_classes(rows * steps, features, classes, seed);
  nn::Mlp host_model({features, 128, classes}, "mlp", seed);
  nn::Mlp device_model = host_model;
  gpu.adopt(device_model.variables());
  optim::Optimizer const optimizer = optim::Sgd{0.05f};
  auto host_state = optimizer.make_state(host_model.variables().element_count());
  auto device_state = optimizer.make_state(device_model.variables().element_count());
  for (std::size_t step = 0; step < steps; ++step) {
    CAPTURE(step);
    Batch const batch{std::span(data.features).subspan(step * rows * features, rows * features),
                      std::span(data.labels).subspan(step * rows, rows), {}, rows};
    float const host_loss = host_model.forward_backward(batch, exec::Host{});
    float const device_loss = device_model.forward_backward(batch, gpu);
    CHECK(std::abs(device_loss - host_loss) <= 1e-4f * std::abs(host_loss));
    auto& hv = host_model.variables();
    auto& dv = device_model.variables();
    auto const s = static_cast<std::int64_t>(step) + 1;
    optimizer.apply(exec::Host{}, hv.weights(), hv.grads(), host_state, 0, 1.0f, s);
    optimizer.apply(gpu, dv.weights(), dv.grads(), device_state, 0, 1.0f, s);
  }
  gpu.synchronize();
  // By name, read on the host from the device arenas.
  auto const host_weights = host_model.variables().get_weights();
  auto const device_weights = device_model.variables().get_weights();
  for (auto const& [name, tensor] : host_weights) {
    CAPTURE(name);
    CHECK(relative_error(device_weights.at(name).data, tensor.data) < 1e-4);
  }
  Batch const all{data.features, data.labels, {}, rows * steps};
  auto const host_metrics = host_model.evaluate(all, exec::Host{});
  auto const device_metrics = device_model.evaluate(all, gpu);
  CHECK(device_metrics.correct == doctest::Approx(host_metrics.correct).epsilon(0.01));
  CHECK(host_metrics.accuracy() > 0.5);  // it learned: chance is 0.1
}

TEST_CASE("place::CentralStorageGpus trains like CentralStorage on the host, one replica a GPU") {
  // The central weights in page-locked host memory, read by every device's kernels; the sum and
  // the update on the host, in lock step.
  using OnGpus = Strategy<nn::Mlp, place::CentralStorageGpus, comm::InProcess, sync::Synchronous>;
  using OnHost = Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Synchronous>;
  int const gpus = exec::cuda::device_count();
  std::size_t const features = 64, classes = 10, batch = 64 * static_cast<std::size_t>(gpus);
  auto const data = testing::synthetic_classes(batch * 30, features, classes, seed);
  nn::Mlp const model({features, 96, classes}, "mlp", seed);
  Trainer<OnGpus> central(OnGpus(model, place::CentralStorageGpus{.strict = true}),
                          optim::Momentum{0.05f, 0.9f});
  Trainer<OnHost> reference(OnHost(model, place::CentralStorage{.replicas = gpus}),
                            optim::Momentum{0.05f, 0.9f});
  CHECK(central.strategy().replicas() == static_cast<std::size_t>(gpus));
  FitOptions const options{.steps = 20, .batch_size = batch, .log_every = 0, .log = nullptr};
  CHECK(central.fit(data, options).global_step == 20);
  reference.fit(data, options);
  auto const got = central.get_weights();
  for (auto const& [name, tensor] : reference.get_weights()) {
    CAPTURE(name);
    CHECK(relative_error(got.at(name).data, tensor.data) < 1e-4);
  }
}

#if defined(CONVOY_WITH_NCCL)
TEST_CASE("comm::Nccl with one rank on the device trains like place::Gpu over InProcess") {
  // One rank: NCCL's allreduce over one device is the identity, so the bucketed step, the
  // optimizer on the device and the run's start (every replica takes rank 0's state) must give
  // the weights of the in-process engine on the same device, to float tolerance.
  using NcclStrategy = Strategy<nn::Mlp, place::Gpu, comm::Nccl, sync::Synchronous>;
  using InProcessGpu = Strategy<nn::Mlp, place::Gpu, comm::InProcess, sync::Synchronous>;
  std::size_t const features = 64, classes = 10, batch = 128;
  auto const data = testing::synthetic_classes(batch * 40, features, classes, seed);
  nn::Mlp const model({features, 96, 48, classes}, "mlp", seed);
  Cluster alone;  // a single process: rank 0 of 1, no coordinator to ask
  // Buckets of 4 KiB: several per step, so the overlap path runs.
  Trainer<NcclStrategy> nccl(
      NcclStrategy(model, place::Gpu{.device = 0, .strict = true},
                   comm::Nccl{.cluster = alone, .bucket_bytes = 4096, .timeout = std::chrono::seconds(60)}),
      optim::Momentum{0.05f, 0.9f});
  Trainer<InProcessGpu> reference(InProcessGpu(model, place::Gpu{.device = 0, .strict = true}),
                                  optim::Momentum{0.05f, 0.9f});
  FitOptions const options{.steps = 30, .batch_size = batch, .log_every = 0, .log = nullptr};
  auto const got = nccl.fit(data, options);
  auto const want = reference.fit(data, options);
  CHECK(got.global_step == 30);
  CHECK(nccl.strategy().counters().applied == 30);
  auto const got_weights = nccl.get_weights();
  for (auto const& [name, tensor] : reference.get_weights()) {
    CAPTURE(name);
    CHECK(relative_error(got_weights.at(name).data, tensor.data) < 1e-5);
  }
  CHECK(std::abs(got.last_loss - want.last_loss) <= 1e-5f * std::abs(want.last_loss));
  // A second run goes on from the first: counters and the momentum slots carry over.
  CHECK(nccl.fit(data, FitOptions{.steps = 35, .batch_size = batch, .log_every = 0, .log = nullptr})
            .global_step == 35);
}

TEST_CASE("comm::Nccl over place::MirroredGpus trains like Mirrored on the host, one replica a GPU") {
  // Every local device, one NCCL rank each in one group: the replicas' slices of each batch and the
  // mean of their gradients are those of Mirrored with as many host replicas.
  using NcclStrategy = Strategy<nn::Mlp, place::MirroredGpus, comm::Nccl, sync::Synchronous>;
  using HostMirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  int const gpus = exec::cuda::device_count();
  std::size_t const features = 64, classes = 10, batch = 96 * static_cast<std::size_t>(gpus);
  auto const data = testing::synthetic_classes(batch * 30, features, classes, seed);
  nn::Mlp const model({features, 96, classes}, "mlp", seed);
  Trainer<NcclStrategy> nccl(NcclStrategy(model, place::MirroredGpus{.strict = true},
                                          comm::Nccl{.cluster = Cluster{}, .bucket_bytes = 8192}),
                             optim::Momentum{0.05f, 0.9f});
  Trainer<HostMirrored> reference(HostMirrored(model, place::Mirrored{.replicas = gpus}),
                                  optim::Momentum{0.05f, 0.9f});
  CHECK(nccl.strategy().replicas() == static_cast<std::size_t>(gpus));
  FitOptions const options{.steps = 20, .batch_size = batch, .log_every = 0, .log = nullptr};
  auto const got = nccl.fit(data, options);
  reference.fit(data, options);
  CHECK(got.global_step == 20);
  auto const got_weights = nccl.get_weights();
  for (auto const& [name, tensor] : reference.get_weights()) {
    CAPTURE(name);
    CHECK(relative_error(got_weights.at(name).data, tensor.data) < 1e-4);
  }
}
#endif

TEST_SUITE_END();

namespace {

// Captures what std::clog receives while alive.
struct ClogCapture {
  std::ostringstream text;
  std::streambuf* old = std::clog.rdbuf(text.rdbuf());
  ~ClogCapture() { std::clog.rdbuf(old); }
};

using GpuStrategy = Strategy<nn::Mlp, place::Gpu, comm::InProcess, sync::Synchronous>;
using HostStrategy = Strategy<nn::Mlp, place::Host, comm::InProcess, sync::Synchronous>;

std::string devices_seen(int count) {
  if (count == 0) return "no device";
  return std::to_string(count) + " device" + (count == 1 ? "" : "s") + " (/gpu:0-" +
         std::to_string(count - 1) + ")";
}

}  // namespace

TEST_SUITE_BEGIN("placement");

TEST_CASE("place::Gpu uses the device, or says in one line that the runtime sees none") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  GpuStrategy const soft(nn::Mlp({4, 2}), place::Gpu{.device = 0, .log_placement = true});
  std::string const text = capture.text.str();
  if (count == 0) {
    CHECK(text.starts_with(
        "convoy: place::Gpu{device 0} cannot be honoured: the CUDA runtime sees no device; "
        "running on the host (/cpu:0) instead\n"));
    CHECK(text.find("convoy placement: mlp/layer1/kernel {4, 2} -> /cpu:0\n") != std::string::npos);
  } else {
    CHECK(text.starts_with("convoy placement: place::Gpu computes on " +
                           exec::cuda::describe(exec::cuda::device_info(0)) + "\n"));
    CHECK(text.find("convoy placement: mlp/layer1/kernel {4, 2} -> /gpu:0\n") != std::string::npos);
    CHECK(text.find("replica 0 computes forward_backward on /gpu:0") != std::string::npos);
  }
}

TEST_CASE("place::Gpu names the devices there are when asked for one past them") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  GpuStrategy const soft(nn::Mlp({4, 2}), place::Gpu{.device = count});
  CHECK(capture.text.str() == "convoy: place::Gpu{device " + std::to_string(count) +
                                  "} cannot be honoured: the CUDA runtime sees " +
                                  devices_seen(count) + "; running on the host (/cpu:0) instead\n");
}

TEST_CASE("place::Gpu under strict placement throws PlacementError and prints nothing") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  std::string const expected = "convoy: place::Gpu{device " + std::to_string(count) +
                               "} cannot be honoured: the CUDA runtime sees " + devices_seen(count) +
                               " (strict placement); use place::Host, or turn strict off";
  CHECK_THROWS_WITH_AS(GpuStrategy(nn::Mlp({4, 2}), place::Gpu{.device = count, .strict = true}),
                       expected.c_str(), PlacementError);
  CHECK(capture.text.str().empty());
}

TEST_CASE("place::Gpu's default device is the local rank the cluster resolver reads") {
  ::setenv("LOCAL_RANK", "3", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  int const ordinal = place::Gpu{}.ordinal();
  for (char const* name : {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    ::unsetenv(name);
  CHECK(ordinal == 3);
  CHECK(place::Gpu{}.ordinal() == 0);
  CHECK(place::Gpu{.device = 2}.ordinal() == 2);
}

TEST_CASE("a strategy on place::Gpu trains step for step like one on place::Host") {
  // Momentum, so that the optimizer's slots live where the placement puts them.
  std::size_t const features = 32, classes = 4, batch = 40;
  auto const data = testing::synthetic_classes(batch * 25, features, classes, seed);
  nn::Mlp const model({features, 24, classes}, "mlp", seed);
  ClogCapture quiet;  // the fallback line, on a machine without a device
  Trainer<GpuStrategy> on_gpu(GpuStrategy(model, place::Gpu{.device = 0}), optim::Momentum{0.05f, 0.9f});
  Trainer<HostStrategy> on_host(HostStrategy(model), optim::Momentum{0.05f, 0.9f});
  FitOptions const options{.steps = 25, .batch_size = batch, .log_every = 0, .log = nullptr};
  auto const gpu_result = on_gpu.fit(data, options);
  auto const host_result = on_host.fit(data, options);
  CHECK(gpu_result.global_step == 25);
  auto const gpu_weights = on_gpu.get_weights();
  auto const host_weights = on_host.get_weights();
  for (auto const& [name, tensor] : host_weights) {
    CAPTURE(name);
    if (exec::cuda::device_count() == 0) {
      CHECK(gpu_weights.at(name).data == tensor.data);  // the same host math, bit for bit
    } else {
      CHECK(relative_error(gpu_weights.at(name).data, tensor.data) < 1e-4);
    }
  }
  CHECK(std::abs(gpu_result.last_loss - host_result.last_loss) <= 1e-4f * host_result.last_loss);
}

TEST_CASE("a replica on a device gathers its batches in page-locked memory, one on the host in "
          "the heap") {
  ClogCapture quiet;  // the fallback line, on a machine without a device
  GpuStrategy const on_gpu(nn::Mlp({4, 2}), place::Gpu{.device = 0});
  HostStrategy const on_host(nn::Mlp({4, 2}));
  CHECK(on_host.batch_memory(0) == std::pmr::new_delete_resource());
  if (exec::cuda::device_count() == 0) {
    CHECK(on_gpu.batch_memory(0) == std::pmr::new_delete_resource());
  } else {
    std::pmr::memory_resource* const memory = on_gpu.batch_memory(0);
    CHECK(memory == exec::cuda::pinned_memory());
    void* p = memory->allocate(4096);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeHost);  // page-locked: a DMA source
    memory->deallocate(p, 4096);
  }
}

#if defined(CONVOY_WITH_NCCL)
TEST_CASE("comm::Nccl refuses a GPU placement that fell back to the host, naming why") {
  int const count = exec::cuda::device_count();
  char const* const refusal = "comm::Nccl reduces on CUDA devices, and the placement is computing "
                              "on the host";
  ClogCapture capture;  // the placement's one line on the fallback
  using OneGpu = Strategy<nn::Mlp, place::Gpu, comm::Nccl, sync::Synchronous>;
  CHECK_THROWS_WITH_AS(OneGpu(nn::Mlp({4, 2}), place::Gpu{.device = count},
                              comm::Nccl{.cluster = Cluster{}}),
                       doctest::Contains(refusal), PlacementError);
  CHECK(capture.text.str().find("place::Gpu{device " + std::to_string(count) +
                                "} cannot be honoured") != std::string::npos);
  using EveryGpu = Strategy<nn::Mlp, place::MirroredGpus, comm::Nccl, sync::Synchronous>;
  CHECK_THROWS_WITH_AS(EveryGpu(nn::Mlp({4, 2}), place::MirroredGpus{.devices = {count}},
                                comm::Nccl{.cluster = Cluster{}}),
                       doctest::Contains(refusal), PlacementError);
  CHECK(capture.text.str().find("place::MirroredGpus{device " + std::to_string(count) +
                                "} cannot be honoured") != std::string::npos);
}
#endif

TEST_CASE("place::MirroredGpus takes every device there is, or one host replica with one line") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  place::MirroredGpus all;
  all.resolve();
  if (count == 0) {
    CHECK(capture.text.str() ==
          "convoy: place::MirroredGpus{} cannot be honoured: the CUDA runtime sees no device; one "
          "replica runs on the host (/cpu:0) instead\n");
    CHECK(all.replica_count() == 1);
    CHECK(!all.context(0).on_device());
  } else {
    CHECK(capture.text.str().empty());
    CHECK(all.replica_count() == count);
    CHECK(all.context(static_cast<std::size_t>(count - 1)).device() == count - 1);
  }
  std::string const expected = "convoy: place::MirroredGpus{device " + std::to_string(count) +
                               "} cannot be honoured: the CUDA runtime sees ";
  place::MirroredGpus strict{.devices = {count}, .strict = true};
  CHECK_THROWS_WITH_AS(strict.resolve(), doctest::Contains(expected.c_str()), PlacementError);
}

TEST_CASE("place::CentralStorageGpus with no device left trains one host replica like "
          "CentralStorage") {
  int const count = exec::cuda::device_count();
  auto const data = testing::synthetic_classes(400, 6, 3, seed);
  nn::Mlp const model({6, 8, 3}, "mlp", seed);
  RunPlan plan{.until = 10,
               .batch = [&](std::size_t, std::int64_t step) {
                 return data.slice(static_cast<std::size_t>(step) * 40, 40);
               },
               .after_step = {}};
  ClogCapture capture;
  Strategy<nn::Mlp, place::CentralStorageGpus, comm::InProcess, sync::Synchronous> soft(
      model, place::CentralStorageGpus{.devices = {count}});
  CHECK(capture.text.str().find("place::CentralStorageGpus{device " + std::to_string(count) +
                                "} cannot be honoured") != std::string::npos);
  CHECK(soft.replicas() == 1);
  soft.run(plan);
  Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Synchronous> host(
      model, place::CentralStorage{.replicas = 1});
  host.run(plan);
  CHECK(soft.weights() == host.weights());
}

TEST_CASE("a CUDA call that fails names the call and the device") {
  int const count = exec::cuda::device_count();
  std::string const expected = "failed on /gpu:" + std::to_string(count);
  CHECK_THROWS_WITH_AS(exec::Cuda{count}, doctest::Contains(expected.c_str()), DeviceError);
}

TEST_SUITE_END();

// `--placement` runs the placement suite, on any machine; otherwise the device suite runs, or the
// program exits 77 (skipped) when the runtime sees no device.
int main(int argc, char** argv) {
  bool const placement = argc > 1 && std::strcmp(argv[1], "--placement") == 0;
  if (!placement && exec::cuda::device_count() == 0) {
    std::puts("test_gpu: no CUDA device; skipped");
    return 77;
  }
  std::printf("test_gpu: %s, seed %llu\n",
              exec::cuda::device_count() == 0
                  ? "no CUDA device"
                  : exec::cuda::describe(exec::cuda::device_info(0)).c_str(),
              static_cast<unsigned long long>(seed));
  std::vector<char*> args(argv, argv + argc);
  if (placement) args.erase(args.begin() + 1);
  doctest::Context context(static_cast<int>(args.size()), args.data());
  context.setOption("test-suite", placement ? "placement" : "device");
  return context.run();
}
