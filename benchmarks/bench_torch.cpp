// Training throughput of LibTorch models through convoy::torch: the example's ResNet (64 rows a
// replica) and a 784-500-10 MLP written in LibTorch (100 rows a replica). For each: a plain
// LibTorch loop on one thread (forward, cross-entropy, backward, torch::optim::SGD) against the
// Host strategy on one replica (the adapter's overhead), and two plain loops on two threads at once
// against Mirrored with 2 replicas at twice the batch (the ceiling of two replicas that exchange
// nothing). A last row runs Mirrored with 2 replicas of 2 LibTorch threads each: the
// oversubscription that one thread a replica avoids. Every figure is a ratio to one measured in the
// same run; each configuration is the best of --repeats runs, interleaved. Then the ResNet as a
// synchronous parameter-server run of 1 ps + 2 workers, one killed, and, where convoy::gloo is
// built, as 3 synchronous Gloo workers, one killed: convoy's recovery against the peers' way of
// restarting every task from the checkpoint (benchmarks/recovery.hpp; the tasks are this program
// started again).
//
// Run: build/benchmarks/bench_torch [--repeats N] [--steps N] [--quick] [--csv PATH] [--json PATH]
#include <convoy/torch/model.hpp>
// (LibTorch first: its logging defines CHECK macros, which no convoy header uses.)
#include <algorithm>
#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#if CONVOY_BENCH_GLOO
#include <convoy/comm/gloo.hpp>
#endif
#include <convoy/convoy.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../examples/09_torch_resnet/resnet.hpp"
#include "options.hpp"
#include "processes.hpp"
#include "recovery.hpp"
#include "report.hpp"
#include "synthetic.hpp"

using namespace convoy;
namespace tnn = torch::nn;  // not nn: convoy::nn is in scope

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

tnn::Sequential mlp() {
  return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 500), tnn::ReLU(), tnn::Linear(500, 10));
}

struct Figure {
  std::string name, key;
  int replicas;
  double samples_per_second = 0.0;
};

constexpr float learning_rate = 0.01f;

// What a user writes without convoy: one module, rows [k * batch, ...) at step k, on one thread
// (one OpenMP thread for ATen and one OpenBLAS thread, as a convoy replica gets).
template <class Net>
double plain_loop(io::Dataset const& data, std::function<Net()> const& make, std::size_t batch,
                  std::int64_t steps) {
  static_cast<void>(at::get_num_threads());  // ATen's first use on this thread sets its count
  exec::Host::ReplicaScope const one_thread;
  torch::manual_seed(1);
  auto net = make();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(learning_rate));
  auto const start = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < steps; ++k) {
    auto const b = data.slice((static_cast<std::size_t>(k) * batch) % (data.rows() - batch), batch);
    auto const x = torch::from_blob(const_cast<float*>(b.features.data()),
                                    {static_cast<std::int64_t>(batch), 1, 28, 28});
    sgd.zero_grad();
    auto const loss = libtorch::cross_entropy(net->forward(x), b);
    loss.backward();
    sgd.step();
  }
  return static_cast<double>(steps * static_cast<std::int64_t>(batch)) / seconds_since(start);
}

// Two plain loops at once on two threads, exchanging nothing.
template <class Net>
double independent_pair(io::Dataset const& data, std::function<Net()> const& make,
                        std::size_t batch, std::int64_t steps) {
  auto const start = std::chrono::steady_clock::now();
  {
    std::jthread other([&] { plain_loop(data, make, batch, steps); });
    plain_loop(data, make, batch, steps);
  }
  return static_cast<double>(2 * steps * static_cast<std::int64_t>(batch)) / seconds_since(start);
}

template <class Net, class Placement>
double with_strategy(io::Dataset const& data, std::function<Net()> const& make, Placement placement,
                     std::size_t batch, std::int64_t steps, int threads = 1) {
  using S = Strategy<libtorch::Model<Net>, Placement, comm::InProcess, sync::Synchronous>;
  torch::manual_seed(1);
  libtorch::Model<Net> model(make, {.row_shape = {1, 28, 28}, .threads = threads});
  S strategy{std::move(model), placement};
  strategy.set_optimizer(optim::Sgd{.learning_rate = learning_rate});
  auto const replicas = strategy.replicas();
  RunPlan plan;
  plan.until = steps;
  plan.batch = [&](std::size_t r, std::int64_t k) {
    auto const begin = (static_cast<std::size_t>(k) * replicas + r) * batch;
    return data.slice(begin % (data.rows() - batch), batch);
  };
  auto const start = std::chrono::steady_clock::now();
  strategy.run(plan);
  return static_cast<double>(steps * static_cast<std::int64_t>(batch * replicas)) /
         seconds_since(start);
}

template <class Net>
bench::Record bench_net(io::Dataset const& data, std::string const& name,
                        std::function<Net()> const& make, std::size_t batch, std::int64_t steps,
                        int repeats) {
  std::vector<Figure> figures{{"plain loop", "plain_loop", 1},
                              {"Host", "host", 1},
                              {"2 plain loops", "independent_2", 2},
                              {"Mirrored", "mirrored_2", 2},
                              {"Mirrored, 2 thr.", "mirrored_2_two_threads", 2}};
  auto const two = place::Mirrored{.replicas = 2};
  std::vector<std::function<double()>> const runs{
      [&] { return plain_loop(data, make, batch, steps); },
      [&] { return with_strategy(data, make, place::Host{}, batch, steps); },
      [&] { return independent_pair(data, make, batch, steps); },
      [&] { return with_strategy(data, make, two, batch, steps); },
      [&] { return with_strategy(data, make, two, batch, steps, 2); }};
  auto const best = bench::best_of(runs, repeats);
  for (std::size_t f = 0; f < figures.size(); ++f) figures[f].samples_per_second = best[f];
  double const plain = figures[0].samples_per_second, pair = figures[2].samples_per_second;
  std::printf("%s, %zu rows a replica, %lld steps, best of %d\n", name.c_str(), batch,
              static_cast<long long>(steps), repeats);
  std::printf("%-17s %8s %12s %10s %12s\n", "config", "replicas", "samples/sec", "vs plain",
              "vs 2 plain");
  for (auto const& f : figures) {
    std::printf("%-17s %8d %12.0f %10.3f %12.3f\n", f.name.c_str(), f.replicas,
                f.samples_per_second, f.samples_per_second / plain, f.samples_per_second / pair);
  }
  double const overhead = 1.0 - figures[1].samples_per_second / plain;
  double const mirrored = figures[3].samples_per_second / pair;
  std::printf(
      "adapter overhead (Host vs plain loop): %.1f%%   Mirrored 2 vs 2 plain loops: %.3f"
      "   with 2 threads a replica: %.3f\n",
      100 * overhead, mirrored, figures[4].samples_per_second / pair);
  bench::Record record;
  record.set("benchmark", "torch").set("model", name).set("batch", batch).set("steps", steps);
  for (auto const& f : figures) record.set(f.key, f.samples_per_second);
  record.set("overhead", overhead).set("mirrored_2_vs_independent_2", mirrored);
  for (auto const& f : figures) {
    record.add("results", bench::Record{}
                              .set("config", f.name)
                              .set("key", f.key)
                              .set("replicas", f.replicas)
                              .set("samples_per_second", f.samples_per_second)
                              .set("vs_plain", f.samples_per_second / plain)
                              .set("vs_independent_2", f.samples_per_second / pair));
  }
  return record;
}

using ResNetModel = libtorch::Model<examples::ResNet>;
constexpr std::size_t recovery_rows = 64;  // a worker's rows a step

// The ResNet under strategy S, `workers` of them in lock step, a checkpoint every `every` steps,
// each step logged for the recovery figures.
template <class S>
int recover_task(S strategy, int workers, RankJobs jobs, std::int64_t every, std::int64_t steps,
                 std::filesystem::path const& dir) {
  bench::recovery::StepLog log(dir, Cluster::from_environment(jobs));
  Trainer<S> trainer{std::move(strategy), optim::Sgd{.learning_rate = learning_rate}};
  auto const data = testing::synthetic_classes(2048, 784, 10);
  // A ps worker's batch is its own; a collective's is the group's, split over its workers.
  auto const batch = std::is_same_v<typename S::comm_type, comm::ZmqPs>
                         ? recovery_rows
                         : recovery_rows * static_cast<std::size_t>(workers);
  trainer.fit(data, {.steps = steps,
                     .batch_size = batch,
                     .log = nullptr,
                     .checkpoint_dir = dir / "checkpoints",
                     .checkpoint_every = every,
                     .callbacks = {log.callback()}});
  return 0;
}

ResNetModel resnet_model() {
  torch::manual_seed(1);
  return ResNetModel([] { return examples::ResNet(); }, {.row_shape = {1, 28, 28}});
}

// "recover:EVERY:STEPS" (1 ps + 2 workers) or "recover-gloo:EVERY:STEPS" (3 Gloo workers).
int task(std::string const& scenario, std::filesystem::path const& dir) {
  long long every = 0, steps = 0;
  if (std::sscanf(scenario.c_str(), "recover:%lld:%lld", &every, &steps) == 2) {
    using S = Strategy<ResNetModel, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
    return recover_task(S{resnet_model(),
                          {},
                          comm::ZmqPs{.log = nullptr, .exit_after_serving = false},
                          sync::Synchronous{.timeout = std::chrono::seconds(60)}},
                        2, RankJobs::ps_first, every, steps, dir);
  }
#if CONVOY_BENCH_GLOO
  if (std::sscanf(scenario.c_str(), "recover-gloo:%lld:%lld", &every, &steps) == 2) {
    using S = Strategy<ResNetModel, place::Host, comm::Gloo, sync::Synchronous>;
    return recover_task(S{resnet_model(), {}, comm::Gloo{.timeout = std::chrono::seconds(30)}}, 3,
                        RankJobs::all_workers, every, steps, dir);
  }
#endif
  return 2;
}

// Recovery of the ResNet in a synchronous run, `ps` ps tasks and `workers` workers: `steps` global
// steps, the last worker killed after `kill_after`, a checkpoint every `every` steps.
std::optional<bench::Record> bench_recovery(std::string const& program, int ps, int workers,
                                            std::int64_t steps, std::int64_t every,
                                            std::int64_t kill_after, int repeats) {
  bool const gloo = ps == 0;
  std::string const cluster =
      gloo ? std::to_string(workers) + " Gloo workers"
           : std::to_string(ps) + " ps + " + std::to_string(workers) + " workers";
  std::printf(
      "\nA synchronous worker killed (%s, the ResNet, %zu rows a worker, %lld steps, "
      "worker %d killed after %lld, a checkpoint every %lld steps), best of %d\n",
      cluster.c_str(), recovery_rows, static_cast<long long>(steps), workers - 1,
      static_cast<long long>(kill_after), static_cast<long long>(every), repeats);
  auto const figures =
      bench::recovery::best_of({.program = program,
                                .scenario = std::string(gloo ? "recover-gloo:" : "recover:") +
                                            std::to_string(every) + ":" + std::to_string(steps),
                                .kill_after = kill_after,
                                .patience = std::chrono::seconds(120),
                                .ps = ps,
                                .workers = workers},
                               repeats);
  if (!figures) return std::nullopt;
  bench::Record record;
  record.set("benchmark", "torch")
      .set("model", gloo ? "ResNet 16-32-64, Gloo recovery" : "ResNet 16-32-64, ps recovery");
  record.set("recovery_steps", steps)
      .set("recovery_kill_after", kill_after)
      .set("recovery_checkpoint_every", every);
  std::string const last = "worker " + std::to_string(workers - 1);
  bench::recovery::report(*figures, record, "convoy: the others train on; " + last + " rejoins");
  return record;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto const status = testing::run_task_if_asked(argc, argv, task)) return *status;
  int repeats = 3;
  std::int64_t steps = 0;  // 0: each model's own
  bool quick = false;
  bench::CommandLine cli("bench_torch",
                         "Training samples/s of LibTorch models through convoy, against plain "
                         "LibTorch loops.");
  cli.integer("--repeats", "N", repeats, 1, "runs of each configuration, best kept (default 3)");
  cli.integer("--steps", "N", steps, std::int64_t{1},
              "steps per configuration (default: ResNet 60, MLP 300)");
  cli.flag("--quick", quick, "a smoke run: 5 steps of each model, 1 repeat, no recovery");
  std::string only;  // empty: every part
  cli.option("--only", "PART", "only one part: resnet, mlp or recovery",
             [&only](std::string_view v) {
               if (v != "resnet" && v != "mlp" && v != "recovery") {
                 return std::string("resnet, mlp or recovery");
               }
               only = v;
               return std::string();
             });
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (quick) {
    steps = 5;
    repeats = 1;
  }
  io::Dataset data;
  try {
    data = io::load_fashion_mnist(io::Split::train);
  } catch (DatasetError const&) {  // same shape: throughput does not depend on the pixels
    data = io::Dataset{
        "constant", 784, std::vector<float>(60000 * 784, 0.5f), std::vector<std::int32_t>(60000, 1),
        0,          {}};
  }
  std::function<examples::ResNet()> const resnet = [] { return examples::ResNet(); };
  std::function<tnn::Sequential()> const dense = mlp;
  auto const runs = [&only](std::string_view part) { return only.empty() || only == part; };
  if (runs("resnet"))
    results.add(bench_net(data, "ResNet 16-32-64", resnet, 64, steps ? steps : 60, repeats));
  if (runs("mlp"))
    results.add(bench_net(data, "MLP 784-500-10", dense, 100, steps ? steps : 300, repeats));
  // The last worker, started again, must find the run still going: LibTorch takes 1-2 s to
  // start, and worker 0 alone then trains on at about 20 steps a second. The kill lands between
  // two checkpoints, as one does on average. A quick run (CI runs it) takes none: three ResNet
  // processes on two loaded cores took it from 23 s to 45 s, and bench_ps's and bench_gloo's
  // quick runs take the same code (recovery.hpp) with the MLP.
  bool recovered = true;
  auto const recover = [&](int ps, int workers) {
    auto record = bench_recovery(argv[0], ps, workers, 300, 50, 125, repeats);
    if (record) results.add(std::move(*record));
    recovered = recovered && record.has_value();
  };
  if (!quick && runs("recovery")) {
    recover(1, 2);
#if CONVOY_BENCH_GLOO
    recover(0, 3);
#endif
  }
  return results.write() && recovered ? 0 : 1;
}
