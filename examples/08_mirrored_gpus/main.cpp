// 08_mirrored_gpus: the Fashion-MNIST MLP on every local GPU of one process (tf.distribute's
// MirroredStrategy), and the speed-up over one GPU, measured in the same run.
//
// What it shows: one type line picks where and how to train. The same Trainer runs
//   Strategy<Mlp, place::Gpu,          comm::Nccl, sync::Synchronous>  on /gpu:0, then
//   Strategy<Mlp, place::MirroredGpus, comm::Nccl, sync::Synchronous>  on every local GPU,
// with the global batch split over the GPUs and their gradients summed by NCCL in buckets during
// the backward pass. It prints each run's samples per second and test accuracy, and the ratio.
// With one GPU it says so, and the two runs are the same placement. Without a GPU, or in a build
// without CUDA and NCCL, it says why and exits 77 (skipped): nothing here can run on the host.
//
// Run:    build/examples/mirrored_gpus [epochs, default 5] [global batch, default 4096]
// Needs:  a build with convoy::cuda and convoy::nccl (nvcc compiles this file), a CUDA device,
//         and Debian's dataset-fashion-mnist package (or CONVOY_FASHION_MNIST_DIR).
#include <convoy/convoy.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "../common/options.hpp"
#if defined(CONVOY_WITH_CUDA) && defined(CONVOY_WITH_NCCL)
#include <convoy/comm/nccl.hpp>
#include <convoy/exec/cuda.hpp>
#endif

namespace {

#if defined(CONVOY_WITH_CUDA) && defined(CONVOY_WITH_NCCL)

struct Run {
  double samples_per_second = 0.0;
  double accuracy = 0.0;
};

// One line picks the placement; everything else is the same for both runs.
template <class Placement>
Run train(Placement placement, convoy::io::Dataset const& train_set,
          convoy::io::Dataset const& test_set, double epochs, std::size_t batch) {
  using Strategy = convoy::Strategy<convoy::nn::Mlp, Placement, convoy::comm::Nccl,
                                    convoy::sync::Synchronous>;
  auto const make_trainer = [&] {
    return convoy::Trainer<Strategy>(
        Strategy(convoy::nn::Mlp({784, 500, 10}), placement,
                 convoy::comm::Nccl{.cluster = convoy::Cluster{}}),
        // A larger rate than 02_fashion_mnist's 0.001 at batch 200: fewer, larger steps.
        convoy::optim::Adam{.learning_rate = 0.002f});
  };
  {  // Untimed: a process's first steps load CUDA's kernels and start cuBLAS and NCCL, which
     // would be charged to whichever run came first (1.9x on one H200, one GPU against itself).
    auto warm = make_trainer();
    (void)warm.fit(train_set, {.steps = 10, .batch_size = batch, .log_every = 0, .log = nullptr});
  }
  auto trainer = make_trainer();
  std::cout << "-- " << trainer.strategy().replicas() << " GPU(s), global batch " << batch << "\n";
  auto const result = trainer.fit(train_set, {.epochs = epochs, .batch_size = batch,
                                              .log_every = 100, .log = &std::cout});
  return {result.samples_per_second, trainer.evaluate(test_set).accuracy()};
}

#endif

int run(int argc, char** argv) {
#if defined(CONVOY_WITH_CUDA) && defined(CONVOY_WITH_NCCL)
  int const gpus = convoy::exec::cuda::device_count();
  if (gpus == 0) {
    std::cout << "mirrored_gpus: the CUDA runtime sees no device; nothing to mirror (skipped)\n";
    return 77;
  }
  double const epochs = argc > 1 ? std::atof(argv[1]) : 5.0;
  std::size_t const batch = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4096;
  if (!(epochs > 0.0) || batch == 0 || batch % static_cast<std::size_t>(gpus) != 0) {
    std::cerr << "usage: mirrored_gpus [epochs > 0] [global batch, a multiple of " << gpus
              << "]\n";
    return 2;
  }
  auto const train_set = convoy::io::load_fashion_mnist(convoy::io::Split::train);
  auto const test_set = convoy::io::load_fashion_mnist(convoy::io::Split::test);

  auto const one = train(convoy::place::Gpu{.device = 0, .strict = true}, train_set, test_set,
                         epochs, batch);
  std::cout << "one GPU: " << one.samples_per_second << " samples/s, test accuracy "
            << one.accuracy << "\n";
  if (gpus == 1) {
    std::cout << "mirrored_gpus: this machine has one GPU, so there is no speed-up to show; "
                 "MirroredGpus runs on it alone\n";
  }
  auto const all = train(convoy::place::MirroredGpus{.strict = true, .log_placement = true},
                         train_set, test_set, epochs, batch);
  std::cout << gpus << " GPU(s): " << all.samples_per_second << " samples/s, test accuracy "
            << all.accuracy << "\n";
  std::cout << "speed-up over one GPU: " << all.samples_per_second / one.samples_per_second
            << "x on " << gpus << " GPU(s)\n";
  return 0;
#else
  (void)argc;
  (void)argv;
  std::cout << "mirrored_gpus: this build has no CUDA backend and NCCL (convoy::cuda and "
               "convoy::nccl); nothing to mirror (skipped)\n";
  return 77;
#endif
}

}  // namespace

// A convoy::Error (no device where strict placement wants one, a missing dataset) is one line and
// status 1.
int main(int argc, char** argv) {
  return examples::run_main("mirrored_gpus", [&] { return run(argc, argv); });
}
