// 05_ps_sync: the Fashion-MNIST MLP trained by a parameter-server cluster, synchronously, with a
// slow worker and backup workers: the TensorFlow book's SyncReplicasOptimizer.
//
// What it shows: every task of the cluster runs this same program, and its role (ps or worker)
// comes from the environment tools/convoy-launch (or torchrun, mpirun, srun, TF_CONFIG) sets. The
// ps holds the variables, runs the optimizer and applies step k once it holds M gradients for it
// (M = replicas_to_aggregate). With M below the worker count, a slow worker no longer sets the
// pace: its gradients arrive after the step they were computed for was applied, and the ps drops
// and counts them. With M equal to the worker count (--aggregate 2) every step waits for it.
//
// Run:   tools/convoy-launch --ps 1 --workers 2 -- build/examples/ps_sync
//        tools/convoy-launch --ps 1 --workers 2 -- build/examples/ps_sync --aggregate 2
//        tools/convoy-launch --ps 1 --workers 2 -- build/examples/ps_sync --delay-ms 0
// Needs: Debian's dataset-fashion-mnist package (or CONVOY_FASHION_MNIST_DIR), python3.
// Expect: progress lines "After N training steps (M global steps), loss on training batch is X
//         (Y sec/batch)" from each worker, then from worker 0 the steps, the gradients the ps
//         dropped (most of the slow worker's with the defaults) and a test accuracy of about 0.85
//         after the default 3000 global steps.
#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>

#include "../common/options.hpp"

namespace {

struct Options {
  std::int64_t steps = 3000;
  int aggregate = 1;     // replicas_to_aggregate: the first M gradients of a step count
  int slow_worker = 1;   // the worker (by rank) that sleeps before each step
  int delay_ms = 20;
  std::int64_t log_every = 500;
};

// The book's MLP, with a worker made slow on purpose: it sleeps before every step.
struct SlowMlp {
  convoy::nn::Mlp mlp{{28 * 28, 500, 10}};
  std::chrono::milliseconds delay{0};

  convoy::Variables& variables() { return mlp.variables(); }
  float forward_backward(convoy::Batch const& batch) {
    std::this_thread::sleep_for(delay);
    return mlp.forward_backward(batch);
  }
  convoy::Metrics evaluate(convoy::Batch const& batch) { return mlp.evaluate(batch); }
};

Options parse(int argc, char** argv) {
  using examples::parse_integer;
  Options o;
  constexpr std::string_view usage =
      "usage: ps_sync [--steps N] [--aggregate M] [--slow-worker RANK] [--delay-ms D] "
      "[--log-every N]\n";
  examples::parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view value) {
    if (flag == "--steps") {
      o.steps = parse_integer<std::int64_t>(flag, value, 1, 1'000'000, "expected 1 to 1000000");
    } else if (flag == "--aggregate") {
      o.aggregate = parse_integer<int>(flag, value, 1, 1024, "expected 1 to the worker count");
    } else if (flag == "--slow-worker") {
      o.slow_worker = parse_integer<int>(flag, value, -1, 1024, "expected a rank, or -1: none");
    } else if (flag == "--delay-ms") {
      o.delay_ms = parse_integer<int>(flag, value, 0, 10'000, "expected 0 to 10000");
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
  // The one line that makes this a synchronous parameter-server cluster.
  using Strategy = convoy::Strategy<SlowMlp, convoy::place::Sharded<>, convoy::comm::ZmqPs,
                                    convoy::sync::Synchronous>;
  auto const cluster = convoy::Cluster::from_environment();
  SlowMlp model;
  if (cluster.worker_rank() == o.slow_worker) model.delay = std::chrono::milliseconds(o.delay_ms);

  auto const dir = convoy::io::default_fashion_mnist_dir();
  auto const train = convoy::io::load_fashion_mnist(convoy::io::Split::train, dir);
  Strategy strategy{model, {}, {.cluster = cluster}, {.replicas_to_aggregate = o.aggregate}};
  convoy::Trainer<Strategy> trainer{std::move(strategy), convoy::optim::Adam{0.001f}};
  auto const result = trainer.fit(train, {.steps = o.steps,
                                          .batch_size = 100,
                                          .log_every = o.log_every,
                                          .log_format = convoy::LogFormat::tensorflow});
  if (!trainer.strategy().chief()) return 0;
  // The chief reports the ps's counters: how many of each worker's gradients went into a step.
  auto const& applied = trainer.strategy().counters().local_steps;
  for (std::size_t w = 0; w < applied.size(); ++w) {
    std::cout << "worker " << w << (static_cast<int>(w) == o.slow_worker ? " (slow)" : "")
              << ": " << applied[w] << " gradients applied\n";
  }
  auto const test = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir);
  std::cout << result.global_step << " global steps from " << result.applied
            << " gradients; the ps dropped " << result.dropped << " late ones (M = " << o.aggregate
            << " of " << cluster.worker_count() << " workers)\n"
            << "test accuracy: " << trainer.evaluate(test).accuracy() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main("ps_sync", [&] { return run(parse(argc, argv)); });
}
