// 03_strategies: one model, the Fashion-MNIST MLP, trained under five strategies that differ only
// in their template arguments, ending with a table of test accuracy and samples per second.
//
// What it shows: train<Strategy>() is written once. Mirrored and CentralStorage run here, as
// threads; the parameter-server rows (Sharded<>, ZmqPs, and each Sync policy) run as a cluster of
// 1 ps and 2 workers that this program starts through tools/convoy-launch, each task being this
// same program with "--task NAME".
//
// Run:   build/examples/strategies                 (300 steps each, batch 100)
//        build/examples/strategies --steps 3000 --launcher /usr/local/bin/convoy-launch
//        build/examples/strategies --expect-accuracy 0.8   (exit status 1 below it)
// Needs: Debian's dataset-fashion-mnist package (or CONVOY_FASHION_MNIST_DIR), python3.
// Expect: a table whose every row reaches at least 0.80 test accuracy with the defaults.
#include <array>
#include <charconv>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace place = convoy::place;
namespace comm = convoy::comm;
namespace sync = convoy::sync;

struct Row {
  std::string strategy;
  double accuracy = 0.0;
  double samples_per_second = 0.0;
};

struct Options {
  std::int64_t steps = 300;
  std::string launcher = CONVOY_LAUNCH_DEFAULT;  // the launcher beside the sources
  std::string task;                                // set when started as a cluster task
  double expect = 0.0;  // --expect-accuracy: exit status 1 when a row falls below it
};

convoy::nn::Mlp model() { return convoy::nn::Mlp{{28 * 28, 500, 10}}; }

// The training code, once for every strategy type. On a ps task fit() serves its shard and ends
// the process (comm::ZmqPs::exit_after_serving): what follows it runs on the workers.
template <class Strategy>
Row train(std::string name, Strategy strategy, Options const& o) {
  auto const dir = convoy::io::default_fashion_mnist_dir();
  auto const train_set = convoy::io::load_fashion_mnist(convoy::io::Split::train, dir);
  convoy::Trainer<Strategy> trainer{std::move(strategy), convoy::optim::Adam{0.001f}};
  auto const result = trainer.fit(train_set, {.steps = o.steps, .batch_size = 100, .log = nullptr});
  auto const test = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir);
  return {std::move(name), trainer.evaluate(test).accuracy(), result.samples_per_second};
}

// This program as one task of a parameter-server cluster; the chief prints its row.
template <class Sync>
int cluster_task(Options const& o) {
  using Strategy = convoy::Strategy<convoy::nn::Mlp, place::Sharded<>, comm::ZmqPs, Sync>;
  Strategy strategy{model(), {}, comm::ZmqPs{.log = nullptr}, Sync{}};
  bool const chief = strategy.chief();
  auto const row = train(o.task, std::move(strategy), o);
  if (chief) std::cout << "row: " << row.accuracy << " " << row.samples_per_second << std::endl;
  return 0;
}

// Starts a cluster of 1 ps and 2 workers of this program for `task`; reads the chief's row.
Row run_cluster(std::string const& self, std::string const& task, Options const& o) {
  std::string const command = o.launcher + " --ps 1 --workers 2 --timeout 600 -- '" + self +
                              "' --task " + task + " --steps " + std::to_string(o.steps);
  Row row{"Sharded<>, ZmqPs, " + task};
  FILE* out = popen(command.c_str(), "r");
  if (!out) throw convoy::Error("strategies: cannot run " + o.launcher);
  std::array<char, 4096> line{};
  bool found = false;
  while (std::fgets(line.data(), line.size(), out)) {
    std::string_view const text(line.data());
    auto const at = text.find("row: ");
    if (text.starts_with("[worker:0]") && at != std::string_view::npos) {
      found = std::sscanf(line.data() + at, "row: %lf %lf", &row.accuracy,
                          &row.samples_per_second) == 2;
    } else if (!text.starts_with("[ps:")) {
      std::cerr << text;  // the launcher's and the workers' other lines, for a failure
    }
  }
  int const status = pclose(out);
  if (status != 0 || !found) {
    throw convoy::Error("strategies: the cluster for " + task + " failed (" + command + ")");
  }
  return row;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw convoy::Error("strategies: " + std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--steps") {
      auto const text = value();
      auto const [end, error] = std::from_chars(text.data(), text.data() + text.size(), o.steps);
      if (error != std::errc() || end != text.data() + text.size() || o.steps <= 0) {
        throw convoy::Error("strategies: --steps wants a positive whole number, not '" + text + "'");
      }
    } else if (arg == "--expect-accuracy") {
      o.expect = std::stod(value());
    } else if (arg == "--launcher") {
      o.launcher = value();
    } else if (arg == "--task") {
      o.task = value();
    } else {
      throw convoy::Error("strategies: unknown option '" + std::string(arg) +
                          "'; options: --steps N, --launcher PATH, --expect-accuracy X");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto const o = parse(argc, argv);
    if (o.task == "sync") return cluster_task<sync::Synchronous>(o);
    if (o.task == "async") return cluster_task<sync::Asynchronous>(o);
    if (o.task == "ssp:2") return cluster_task<sync::BoundedStaleness<2>>(o);
    if (!o.task.empty()) throw convoy::Error("strategies: unknown task '" + o.task + "'");

    using Mirrored = convoy::Strategy<convoy::nn::Mlp, place::Mirrored, comm::InProcess,
                                      sync::Synchronous>;
    using Central = convoy::Strategy<convoy::nn::Mlp, place::CentralStorage, comm::InProcess,
                                     sync::Synchronous>;
    std::vector<Row> rows;
    rows.push_back(train("Mirrored, InProcess, sync", Mirrored{model(), {.replicas = 2}}, o));
    rows.push_back(train("CentralStorage, InProcess, sync", Central{model(), {.replicas = 2}}, o));
    for (std::string task : {"sync", "async", "ssp:2"}) rows.push_back(run_cluster(argv[0], task, o));

    std::printf("\n%-34s %14s %12s\n", "strategy (2 replicas or workers)", "test accuracy",
                "samples/s");
    for (auto const& r : rows) {
      std::printf("%-34s %14.4f %12.0f\n", r.strategy.c_str(), r.accuracy, r.samples_per_second);
    }
    for (auto const& r : rows) {
      if (r.accuracy < o.expect) {
        std::cerr << "strategies: " << r.strategy << " reached " << r.accuracy << ", under "
                  << o.expect << "\n";
        return 1;
      }
    }
    return 0;
  } catch (std::exception const& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
