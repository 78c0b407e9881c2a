// 06_ps_async: the Fashion-MNIST MLP trained by a parameter-server cluster, asynchronously: the
// TensorFlow book's between-graph replication without SyncReplicasOptimizer.
//
// What it shows: the ps applies every gradient the moment it arrives, so no worker waits for
// another, and the global step is the sum of the workers' steps. Each worker pulls the current
// weights with every push, so a gradient is computed on weights at most a few updates old. Every
// task runs this same program; its role comes from the environment the launcher sets.
//
// Run:   tools/convoy-launch --ps 1 --workers 2 -- build/examples/ps_async
//        tools/convoy-launch --ps 2 --workers 3 -- build/examples/ps_async --steps 6000
// Needs: Debian's dataset-fashion-mnist package (or CONVOY_FASHION_MNIST_DIR), python3.
// Expect: progress lines "After N training steps (M global steps), loss on training batch is X
//         (Y sec/batch)" from each worker, where M runs ahead of N, then from worker 0 each
//         worker's steps, their sum (the global step) and a test accuracy of about 0.85 after the
//         default 3000 global steps.
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <iostream>
#include <numeric>
#include <string>
#include <string_view>

#include "../common/options.hpp"

namespace {

struct Options {
  std::int64_t steps = 3000;  // global steps: every worker's steps together
  std::int64_t log_every = 500;
};

Options parse(int argc, char** argv) {
  using examples::parse_integer;
  Options o;
  constexpr std::string_view usage =
      "usage: ps_async [--steps N] [--log-every N]\n";
  examples::parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--steps") {
      o.steps = parse_integer<std::int64_t>(flag, value, 1, 1'000'000, "expected 1 to 1000000");
    } else if (flag == "--log-every") {
      o.log_every = parse_integer<std::int64_t>(flag, value, 0, 1'000'000, "expected >= 0");
    } else {
      return false;
    }
    return true;
  });
  return o;
}

int run(Options const& o) {
  // The one line that makes this an asynchronous parameter-server cluster.
  using Strategy = convoy::Strategy<convoy::nn::Mlp, convoy::place::Sharded<>,
                                    convoy::comm::ZmqPs, convoy::sync::Asynchronous>;
  auto const dir = convoy::io::default_fashion_mnist_dir();
  auto const train = convoy::io::load_fashion_mnist(convoy::io::Split::train, dir);
  convoy::Trainer<Strategy> trainer{Strategy{convoy::nn::Mlp{{28 * 28, 500, 10}}},
                                    convoy::optim::Adam{0.001f}};
  auto const result = trainer.fit(train, {.steps = o.steps,
                                          .batch_size = 100,
                                          .log_every = o.log_every,
                                          .log_format = convoy::LogFormat::tensorflow});
  if (!trainer.strategy().chief()) return 0;

  // The chief reports the ps's counters: each worker's steps, and the global step, their sum.
  auto const& steps = trainer.strategy().counters().local_steps;
  for (std::size_t w = 0; w < steps.size(); ++w) {
    std::cout << "worker " << w << ": " << steps[w] << " steps\n";
  }
  auto const test = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir);
  auto const sum = std::accumulate(steps.begin(), steps.end(), std::int64_t{0});
  if (sum != trainer.strategy().global_step()) {
    std::cerr << "ps_async: global step " << trainer.strategy().global_step()
              << " is not the sum of the workers' steps, " << sum << "\n";
    return 1;
  }
  std::cout << "global step " << sum << " is the sum of the workers' steps\n"
            << "trained " << result.global_step << " global steps in " << result.seconds << " s\n"
            << "test accuracy: " << trainer.evaluate(test).accuracy() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main("ps_async", [&] { return run(parse(argc, argv)); });
}
