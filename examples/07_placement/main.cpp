// 07_placement: where variables live and where each step runs, the TensorFlow book's
// log_device_placement and allow_soft_placement, on any machine.
//
// What it shows, top to bottom: (1) place::Host with the placement log: every variable's home and
// the replica that computes the steps; (2) place::Gpu asking for /gpu:0: in a build with CUDA
// (this file is then compiled by nvcc) on a machine with a device, the log names the device and
// the variables live there; otherwise one line says why not (no CUDA in this build, no device) and
// the host trains instead (soft placement); (3) strict placement asking for /gpu:7: a
// PlacementError that says why; (4) with CUDA and a device: the same MLP stepped by hand in
// exec::Cuda, each step's loss next to the host's. The page docs/gpu.md says what runs where.
//
// Run:    build/examples/placement
// Expect: "convoy placement: ..." lines, the device or the fallback line, "strict placement:
//         convoy: ...", and "placement: done". In well under a second without a device.
#include <cmath>
#include <convoy/convoy.hpp>
#include <cstdint>
#include <iostream>
#include <random>

#include "../common/options.hpp"
#if defined(CONVOY_WITH_CUDA)
#include <convoy/exec/cuda.hpp>
#endif

namespace {

// Three Gaussian blobs in 8 dimensions: quick to learn, no files needed.
convoy::io::Dataset blobs(std::size_t rows) {
  convoy::io::Dataset data{.name = "blobs", .cols = 8};
  std::mt19937_64 engine(7);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (std::size_t r = 0; r < rows; ++r) {
    auto const label = static_cast<std::int32_t>(r % 3);
    for (std::size_t c = 0; c < data.cols; ++c)
      data.features.push_back(noise(engine) + (c % 3 == static_cast<std::size_t>(label) ? 1.0f : 0.0f));
    data.labels.push_back(label);
  }
  return data;
}

template <class Placement>
void train(char const* what, Placement placement, convoy::io::Dataset const& data) {
  using Strategy = convoy::Strategy<convoy::nn::Mlp, Placement, convoy::comm::InProcess,
                                    convoy::sync::Synchronous>;
  std::cout << "-- " << what << "\n" << std::flush;
  convoy::Trainer<Strategy> trainer(Strategy(convoy::nn::Mlp({8, 16, 3}), placement),
                                    convoy::optim::Sgd{0.1f});
  auto const result = trainer.fit(data, {.steps = 50, .batch_size = 30, .log_every = 0, .log = nullptr});
  std::clog << std::flush;
  std::cout << what << ": 50 steps, last loss " << result.last_loss << "\n";
}

#if defined(CONVOY_WITH_CUDA)
// (4) The device backend driven by hand: the model's arenas move to the device's memory
// (get_weights() copies them out by name), and forward_backward and the optimizer run there.
void by_hand_on_the_device(convoy::io::Dataset const& data) {
  if (convoy::exec::cuda::device_count() == 0) {
    std::cout << "-- exec::Cuda: the CUDA runtime sees no device; nothing runs on a GPU here\n";
    return;
  }
  std::cout << "-- exec::Cuda on " << convoy::exec::cuda::describe(convoy::exec::cuda::device_info(0))
            << "\n";
  // example-begin device
  convoy::exec::Cuda const gpu(0);
  auto const scope = gpu.enter();  // gpu's device is this thread's current one
  convoy::nn::Mlp host({8, 16, 3}), device = host;
  gpu.adopt(device.variables());  // both arenas to the device's memory
  convoy::optim::Optimizer const sgd = convoy::optim::Sgd{0.1f};
  auto host_state = sgd.make_state(host.variables().element_count());
  auto device_state = sgd.make_state(device.variables().element_count());
  for (std::int64_t step = 1; step <= 5; ++step) {
    auto const batch = data.slice(static_cast<std::size_t>(step - 1) * 30, 30);
    float const on_host = host.forward_backward(batch, convoy::exec::Host{});
    float const on_device = device.forward_backward(batch, gpu);  // returns once the loss is summed
    auto& h = host.variables();
    auto& d = device.variables();
    sgd.apply(convoy::exec::Host{}, h.weights(), h.grads(), host_state, 0, 1.0f, step);
    sgd.apply(gpu, d.weights(), d.grads(), device_state, 0, 1.0f, step);  // queued on gpu.stream()
    std::cout << "step " << step << ": loss on /cpu:0 " << on_host << ", on " << gpu.name << " "
              << on_device << "\n";
  }
  gpu.synchronize();  // the work queued on gpu.stream() is done
  // example-end device
  for (auto const& [name, tensor] : device.variables().get_weights())
    std::cout << "convoy placement: " << name << " " << convoy::to_string(tensor.shape) << " -> "
              << gpu.name << " (device memory; copied here by name)\n";
}
#endif

int run() {
  auto const data = blobs(1500);

  // (1) Everything on the host, and the log says so.
  train("place::Host", convoy::place::Host{.log_placement = true}, data);

  // (2) /gpu:0 where there is one; else the host, and a line that says why (soft placement).
  train("place::Gpu", convoy::place::Gpu{.device = 0, .log_placement = true}, data);

  // (3) Strict placement: a device that cannot be had is an error that names the reason.
  try {
    train("place::Gpu, strict", convoy::place::Gpu{.device = 7, .strict = true}, data);
  } catch (convoy::PlacementError const& e) {
    std::cout << "strict placement: " << e.what() << "\n";
  }

#if defined(CONVOY_WITH_CUDA)
  by_hand_on_the_device(data);
#endif
  std::cout << "placement: done\n";
  return 0;
}

}  // namespace

// Any error but the strict placement's expected one is one line and status 1.
int main() {
  return examples::run_main("placement", [] { return run(); });
}
