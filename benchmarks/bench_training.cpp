// Training throughput of the Fashion-MNIST MLP (784-500-10, batch 100, SGD): a plain hand-written
// loop over the same layers, the Host strategy, and Mirrored with 1 and 2 replicas. Reports
// samples/sec, the strategy's overhead against the plain loop, and the speed-up of 2 replicas over
// one; every figure is a ratio to a reference measured in the same run.
//
// "vs 1 replica" is against the Host strategy. Run:
//   build/benchmarks/bench_training [--steps N] [--repeats N] [--hidden N] [--batch N]
#include <algorithm>
#include <chrono>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace convoy;

namespace {

struct Figure {
  std::string name;
  std::string key;  // in the JSON line
  int replicas;
  double samples_per_second;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The reference: what a user would write without convoy's strategies, with the same sampler,
// model and optimizer.
double plain_loop(io::Dataset const& data, std::vector<std::size_t> const& sizes, std::size_t batch,
                  std::int64_t steps) {
  exec::Host::ReplicaScope const one_thread;
  nn::Mlp model(sizes);
  optim::Optimizer const sgd = optim::Sgd{0.1f};
  auto state = sgd.make_state(model.variables().element_count());
  io::Sampler const sampler(data.rows(), batch, 1, 1);
  io::BatchBuffer buffer;
  auto const start = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < steps; ++k) {
    model.forward_backward(sampler.fill(data, 0, k, buffer));
    sgd.apply(exec::Host{}, model.variables().weights(), model.variables().grads(), state, 0, 1.0f, k + 1);
  }
  return static_cast<double>(steps) * static_cast<double>(batch) / seconds_since(start);
}

// The ceiling for two replicas: two plain loops on two threads at once, each on half the batch,
// exchanging nothing. What Mirrored with 2 replicas loses against it is the cost of keeping them in
// step; what this loses against twice one loop is the machine's (shared caches, memory, clocks).
double independent_pair(io::Dataset const& data, std::vector<std::size_t> const& sizes,
                        std::size_t batch, std::int64_t steps) {
  double rates[2] = {0, 0};
  auto const start = std::chrono::steady_clock::now();
  {
    std::jthread other([&] { rates[1] = plain_loop(data, sizes, batch / 2, steps); });
    rates[0] = plain_loop(data, sizes, batch / 2, steps);
  }
  return static_cast<double>(steps) * static_cast<double>(batch) / seconds_since(start);
}

template <class P>
double with_strategy(io::Dataset const& data, std::vector<std::size_t> const& sizes, P placement,
                     std::size_t batch, std::int64_t steps) {
  using S = Strategy<nn::Mlp, P, comm::InProcess, sync::Synchronous>;
  Trainer<S> trainer{S{nn::Mlp(sizes), placement}, optim::Sgd{0.1f}};
  auto const result =
      trainer.fit(data, {.steps = steps, .batch_size = batch, .log_every = 0, .log = nullptr});
  return result.samples_per_second;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t steps = 600;
  int repeats = 3;
  std::size_t hidden = 500, batch = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const arg = argv[i];
    if (arg == "--steps") steps = std::stoll(argv[i + 1]);
    if (arg == "--repeats") repeats = std::stoi(argv[i + 1]);
    if (arg == "--hidden") hidden = std::stoul(argv[i + 1]);
    if (arg == "--batch") batch = std::stoul(argv[i + 1]);
  }
  io::Dataset data;
  std::string source = "fashion-mnist/train";
  try {
    data = io::load_fashion_mnist(io::Split::train);
  } catch (
      DatasetError const&) {  // same shape, constant pixels: throughput does not depend on them
    source = "constant 60000x784 (Fashion-MNIST not installed)";
    data = io::Dataset{
        "random", 784, std::vector<float>(60000 * 784, 0.5f), std::vector<std::int32_t>(60000, 1),
        0,        {}};
  }
  std::vector<std::size_t> const sizes{784, hidden, 10};

  // Best of `repeats` for each configuration, interleaved so drifts in machine speed hit all alike.
  std::vector<Figure> figures{{"plain loop", "plain_loop", 1, 0},
                              {"Host", "host", 1, 0},
                              {"Mirrored", "mirrored_1", 1, 0},
                              {"Mirrored", "mirrored_2", 2, 0},
                              {"CentralStorage", "central_storage_2", 2, 0},
                              {"2 plain loops", "independent_2", 2, 0}};
  std::vector<std::function<double()>> const runs{
      [&] { return plain_loop(data, sizes, batch, steps); },
      [&] { return with_strategy(data, sizes, place::Host{}, batch, steps); },
      [&] { return with_strategy(data, sizes, place::Mirrored{.replicas = 1}, batch, steps); },
      [&] { return with_strategy(data, sizes, place::Mirrored{.replicas = 2}, batch, steps); },
      [&] {
        return with_strategy(data, sizes, place::CentralStorage{.replicas = 2}, batch, steps);
      },
      [&] { return independent_pair(data, sizes, batch, steps); }};
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t f = 0; f < figures.size(); ++f) {
      figures[f].samples_per_second = std::max(figures[f].samples_per_second, runs[f]());
    }
  }
  double const plain = figures[0].samples_per_second, one = figures[1].samples_per_second;
  std::printf("MLP 784-%zu-10, global batch %zu, %lld steps, best of %d, data %s\n", hidden, batch,
              static_cast<long long>(steps), repeats, source.c_str());
  std::printf("%-15s %8s %14s %14s %16s\n", "config", "replicas", "samples/sec", "vs plain loop",
              "vs 1 replica");
  for (auto const& f : figures) {
    std::printf("%-15s %8d %14.0f %14.3f %16.3f\n", f.name.c_str(), f.replicas,
                f.samples_per_second, f.samples_per_second / plain, f.samples_per_second / one);
  }
  double const overhead = 1.0 - one / plain;
  double const scaling = figures[3].samples_per_second / one;
  double const ceiling = figures[5].samples_per_second / one;
  std::printf(
      "strategy overhead (Host vs plain loop): %.1f%%   2-replica speed-up over 1: %.2fx"
      "   (2 independent loops: %.2fx; Mirrored 2 reaches %.0f%% of them)\n",
      100 * overhead, scaling, ceiling,
      100 * figures[3].samples_per_second / figures[5].samples_per_second);
  std::printf("{\"benchmark\":\"training\",\"model\":\"784-%zu-10\",\"batch\":%zu,\"steps\":%lld",
              hidden, batch, static_cast<long long>(steps));
  for (auto const& f : figures) std::printf(",\"%s\":%.0f", f.key.c_str(), f.samples_per_second);
  std::printf(",\"overhead\":%.4f,\"speedup_2_over_1\":%.3f,\"independent_2_over_1\":%.3f}\n",
              overhead, scaling, ceiling);
}
