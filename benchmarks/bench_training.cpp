// Training throughput of two MLPs: the Fashion-MNIST one (784-500-10, global batch 100) and a wide
// one (784-4096-10, 8 rows per replica, where an update costs about as much as the compute). For
// each: a plain hand-written loop over the same layers, the Host strategy, and 2 replicas under
// Mirrored, CentralStorage, Asynchronous, BoundedStaleness<2> and Synchronous 1-of-2, against two
// independent plain loops (the ceiling of two replicas that exchange nothing). Every row trains on
// the same rows of data; samples/sec counts rows of applied gradients. Every figure is a ratio to a
// reference measured in the same run; "vs 1 replica" is against the Host strategy.
//
// With --kernels LIST it measures instead the Host strategy under each of OpenBLAS's kernel sets in
// LIST, interleaved in one run: an OPENBLAS_CORETYPE name, or "convoy" (OpenBLAS put on Prescott,
// then convoy's selection over it: what a CPU newer than OpenBLAS gets; math/blas_kernels.hpp).
//
// Run: build/benchmarks/bench_training [--repeats N] [--steps N] [--model HIDDEN,BATCH] [--quick]
//      [--kernels LIST] [--csv PATH] [--json PATH]; --help lists the options.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"
#include "report.hpp"

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

template <class P, class Sync = sync::Synchronous>
double with_strategy(io::Dataset const& data, std::vector<std::size_t> const& sizes, P placement,
                     std::size_t batch, std::int64_t steps, Sync sync = {}) {
  using S = Strategy<nn::Mlp, P, comm::InProcess, Sync>;
  Trainer<S> trainer{S{nn::Mlp(sizes), placement, {}, sync}, optim::Sgd{0.1f}};
  // The same rows under every policy: `steps` global batches' worth of data.
  double const epochs = static_cast<double>(steps) * static_cast<double>(batch) /
                        static_cast<double>(data.rows());
  auto const result =
      trainer.fit(data, {.epochs = epochs, .batch_size = batch, .log_every = 0, .log = nullptr});
  return result.samples_per_second;
}

struct Model {
  std::size_t hidden, batch;
  std::int64_t steps;
};

}  // namespace

// One model's table; returns its record (the JSON line).
bench::Record bench_model(io::Dataset const& data, std::string const& source, Model const& m,
                          int repeats) {
  std::vector<std::size_t> const sizes{784, m.hidden, 10};
  auto const steps = m.steps;
  auto const batch = m.batch;
  std::vector<Figure> figures{{"plain loop", "plain_loop", 1, 0},
                              {"Host", "host", 1, 0},
                              {"Host, B/2", "host_half_batch", 1, 0},
                              {"Mirrored", "mirrored_2", 2, 0},
                              {"CentralStorage", "central_storage_2", 2, 0},
                              {"Asynchronous", "asynchronous_2", 2, 0},
                              {"BoundedStal.<2>", "bounded_staleness_2", 2, 0},
                              {"Sync 1 of 2", "sync_1_of_2", 2, 0},
                              {"2 plain loops", "independent_2", 2, 0}};
  auto const two = place::Mirrored{.replicas = 2};
  std::vector<std::function<double()>> const runs{
      [&] { return plain_loop(data, sizes, batch, steps); },
      [&] { return with_strategy(data, sizes, place::Host{}, batch, steps); },
      [&] { return with_strategy(data, sizes, place::Host{}, batch / 2, steps); },
      [&] { return with_strategy(data, sizes, two, batch, steps); },
      [&] {
        return with_strategy(data, sizes, place::CentralStorage{.replicas = 2}, batch, steps);
      },
      [&] { return with_strategy(data, sizes, two, batch, steps, sync::Asynchronous{}); },
      [&] { return with_strategy(data, sizes, two, batch, steps, sync::BoundedStaleness<2>{}); },
      [&] {
        return with_strategy(data, sizes, two, batch, steps,
                             sync::Synchronous{.replicas_to_aggregate = 1});
      },
      [&] { return independent_pair(data, sizes, batch, steps); }};
  auto const best = bench::best_of(runs, repeats);
  for (std::size_t f = 0; f < figures.size(); ++f) figures[f].samples_per_second = best[f];
  double const plain = figures[0].samples_per_second, one = figures[1].samples_per_second;
  // Two references for one replica: the same global batch (what two lock-step replicas must equal
  // in result), and the same rows per replica as each of two (B/2: what two replicas that never
  // waited for each other would each do). Which one a mode should beat depends on its cost per
  // step: a step whose time hardly depends on its rows (the wide model) only scales against B/2.
  double const half = figures[2].samples_per_second;
  std::printf("MLP 784-%zu-10, global batch %zu, %lld global batches of data, best of %d, data %s\n",
              m.hidden, batch, static_cast<long long>(steps), repeats, source.c_str());
  std::printf("%-15s %8s %14s %10s %10s %10s\n", "config", "replicas", "samples/sec", "vs plain",
              "vs 1 (B)", "vs 1 (B/2)");
  for (auto const& f : figures) {
    std::printf("%-15s %8d %14.0f %10.3f %10.3f %10.3f\n", f.name.c_str(), f.replicas,
                f.samples_per_second, f.samples_per_second / plain, f.samples_per_second / one,
                f.samples_per_second / half);
  }
  auto const& mirrored = figures[3];
  auto const& async = figures[5];
  auto const& independent = figures[8];
  std::printf(
      "strategy overhead (Host vs plain loop): %.1f%%   Mirrored 2 over 1: %.2fx   Asynchronous 2 "
      "over 1: %.2fx (B), %.2fx (B/2)   2 independent loops: %.2fx (B), %.2fx (B/2)\n",
      100 * (1.0 - one / plain), mirrored.samples_per_second / one, async.samples_per_second / one,
      async.samples_per_second / half, independent.samples_per_second / one,
      independent.samples_per_second / half);
  bench::Record record;
  record.set("benchmark", "training")
      .set("model", "784-" + std::to_string(m.hidden) + "-10")
      .set("batch", batch)
      .set("steps", steps);
  for (auto const& f : figures) record.set(f.key, f.samples_per_second);
  record.set("overhead", 1.0 - one / plain)
      .set("mirrored_2_over_1", mirrored.samples_per_second / one)
      .set("asynchronous_2_over_1", async.samples_per_second / one)
      .set("asynchronous_2_over_1_half_batch", async.samples_per_second / half)
      .set("independent_2_over_1", independent.samples_per_second / one)
      .set("independent_2_over_1_half_batch", independent.samples_per_second / half);
  // The same figures one per row, for the CSV and the charts (tools/plot bench).
  for (auto const& f : figures) {
    record.add("results", bench::Record{}
                              .set("config", f.name)
                              .set("key", f.key)
                              .set("replicas", f.replicas)
                              .set("samples_per_second", f.samples_per_second)
                              .set("vs_plain", f.samples_per_second / plain)
                              .set("vs_host", f.samples_per_second / one)
                              .set("vs_host_half_batch", f.samples_per_second / half));
  }
  return record;
}

// Puts OpenBLAS on `kernels` (see the top) and returns the core it then runs.
std::string use_kernels(std::string const& kernels) {
  if (kernels != "convoy") return math::detail::force_openblas_core(kernels);
  math::detail::force_openblas_core("Prescott");
  return math::detail::select_kernels("Prescott", nullptr, math::cpu_vectors()).core;
}

// The Host strategy under each kernel set, interleaved; returns the record (the JSON line).
bench::Record bench_kernels(io::Dataset const& data, std::string const& source, Model const& m,
                            int repeats, std::vector<std::string> const& kernels) {
  std::vector<std::size_t> const sizes{784, m.hidden, 10};
  std::vector<std::string> cores(kernels.size());
  std::vector<std::function<double()>> runs;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    runs.push_back([&, i] {
      cores[i] = use_kernels(kernels[i]);
      return with_strategy(data, sizes, place::Host{}, m.batch, m.steps);
    });
  }
  auto const best = bench::best_of(runs, repeats);
  use_kernels(math::host_blas_kernels().core);
  std::printf(
      "MLP 784-%zu-10, Host strategy, batch %zu, %lld batches of data, best of %d, "
      "interleaved, data %s\n",
      m.hidden, m.batch, static_cast<long long>(m.steps), repeats, source.c_str());
  std::printf("%-12s %-12s %14s %10s\n", "kernels", "core", "samples/sec",
              ("vs " + kernels[0]).c_str());
  bench::Record record;
  record.set("benchmark", "training_kernels")
      .set("model", "784-" + std::to_string(m.hidden) + "-10")
      .set("batch", m.batch)
      .set("steps", m.steps);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    std::printf("%-12s %-12s %14.0f %10.2f\n", kernels[i].c_str(), cores[i].c_str(), best[i],
                best[i] / best[0]);
    record.add("results", bench::Record{}
                              .set("kernels", kernels[i])
                              .set("core", cores[i])
                              .set("samples_per_second", best[i])
                              .set("vs_first", best[i] / best[0]));
  }
  return record;
}

int main(int argc, char** argv) {
  int repeats = 3;
  std::int64_t steps = 600;
  bool quick = false;
  // The Fashion-MNIST MLP, and a wide one at 8 rows per replica, where an update costs as much as
  // the compute, so the asynchronous modes' serial part shows.
  std::vector<Model> models{{500, 100, 0}, {4096, 16, 0}};
  bench::CommandLine cli("bench_training",
                         "Training samples/s of two MLPs under each strategy, against a plain loop.");
  cli.integer("--repeats", "N", repeats, 1, "runs of each configuration, best kept (default 3)");
  cli.integer("--steps", "N", steps, std::int64_t{2},
              "global batches of data per configuration (default 600)");
  cli.option("--model", "HIDDEN,BATCH", "only the 784-HIDDEN-10 MLP at global batch BATCH",
             [&models](std::string_view v) {
               std::size_t hidden = 0, batch = 0;
               auto const comma = v.find(',');
               auto const expected = std::string("two whole numbers, HIDDEN >= 1 and BATCH >= 2");
               if (comma == std::string_view::npos) return expected;
               auto const [h_end, h_error] = std::from_chars(v.data(), v.data() + comma, hidden);
               auto const [b_end, b_error] =
                   std::from_chars(v.data() + comma + 1, v.data() + v.size(), batch);
               if (h_error != std::errc{} || b_error != std::errc{} || h_end != v.data() + comma ||
                   b_end != v.data() + v.size() || hidden == 0 || batch < 2) {
                 return expected;
               }
               models = {{hidden, batch, 0}};
               return std::string();
             });
  std::vector<std::string> kernels;
  cli.option("--kernels", "LIST",
             "the Host strategy under each of OpenBLAS's kernel sets instead, e.g. Prescott,convoy",
             [&kernels](std::string_view v) {
               kernels.clear();
               for (std::size_t begin = 0; begin <= v.size();) {
                 auto const end = std::min(v.find(',', begin), v.size());
                 kernels.emplace_back(v.substr(begin, end - begin));
                 if (kernels.back().empty()) return std::string("a comma-separated list of cores");
                 begin = end + 1;
               }
               return std::string();
             });
  cli.flag("--quick", quick,
           "a smoke run: 30 global batches of one model (the first, or --model's), 1 repeat");
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (quick) {
    models.resize(1);
    steps = 30;
    repeats = 1;
  }
  for (auto& m : models) m.steps = steps;
  io::Dataset data;
  std::string source = "fashion-mnist/train";
  try {
    data = io::load_fashion_mnist(io::Split::train);
  } catch (DatasetError const&) {  // same shape, constant pixels: throughput does not depend on them
    source = "constant 60000x784 (Fashion-MNIST not installed)";
    data = io::Dataset{
        "random", 784, std::vector<float>(60000 * 784, 0.5f), std::vector<std::int32_t>(60000, 1),
        0,        {}};
  }
  if (!kernels.empty() && !math::host_blas_kernels().selectable) {
    std::fprintf(stderr,
                 "bench_training: --kernels needs a DYNAMIC_ARCH OpenBLAS; this BLAS is %s\n",
                 math::host_blas_kernels().describe().c_str());
    return 1;
  }
  for (auto const& m : models) {
    results.add(kernels.empty() ? bench_model(data, source, m, repeats)
                                : bench_kernels(data, source, m, repeats, kernels));
  }
  return results.write() ? 0 : 1;
}
