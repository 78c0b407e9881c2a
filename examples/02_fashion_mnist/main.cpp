// 02_fashion_mnist: train the 784-500-10 MLP on Fashion-MNIST, with the strategy picked by name.
//
// What it shows: the whole user program the README opens with. train_mirrored() spells out the
// default strategy (Mirrored replicas, one per core, in-process communication, synchronous
// updates: N replicas take exactly the step one replica would take on the whole batch);
// --strategy picks another compile-time type at run time, each differing from it in one policy
// argument; and the training code, train<Strategy>(), is written once for all of them.
//
// Run:   build/examples/fashion_mnist          (defaults: Adam 0.001, batch 200, 20 epochs)
//        build/examples/fashion_mnist --strategy ssp:2 --replicas 2
//        build/examples/fashion_mnist --optimizer sgd --batch 100 --epochs 5 --log-placement
//        build/examples/fashion_mnist --help
// Needs: Debian's dataset-fashion-mnist package (or --data-dir / CONVOY_FASHION_MNIST_DIR).
// Expect: a line naming the host's GEMM kernels ("host math: OpenBLAS 0.3.21, Cooperlake kernels
//         (chosen by OpenBLAS)"), progress lines "After N training steps (M global steps), loss
//         on training batch is ..." and, at the end, "test accuracy: 0.895" with the defaults on
//         2 replicas (at least 0.883; at least 0.875 under every --strategy), after about 36 s of
//         CPU time: under 20 s on 2 free cores. A bad option ends at once with one line on stderr
//         and exit status 2; an error while training, with status 1.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <convoy/comm/gloo.hpp>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../common/options.hpp"

namespace {

using examples::bad_value;
using examples::parse_integer;
using examples::parse_real;
using examples::UsageError;

// The values --strategy ssp:S, ps-ssp:S and multiworker-ssp:S accept: each is its own type,
// compiled in three times (the example's build takes about 8 s of CPU for each of these), so a few
// that show the range. A program of one's own names the S it trains with.
using Stalenesses = std::integer_sequence<int, 0, 1, 2, 4>;

struct StrategyChoice {
  enum class Kind {
    mirrored,
    central,
    async,
    ssp,
    sync,
    ps_sync,
    ps_async,
    ps_ssp,
    multiworker,
    multiworker_ssp
  };
  Kind kind = Kind::mirrored;
  int n = 0;  // S for ssp:S and ps-ssp:S, M for sync:M and ps-sync:M (0: every worker)
  std::string text = "mirrored";
};

struct Options {
  std::vector<std::size_t> hidden{500};
  std::size_t batch = 200;
  int replicas = 0;  // 0: one per core
  StrategyChoice strategy;
  std::int64_t steps = 0;
  double epochs = 20.0;
  std::string optimizer = "adam";
  float learning_rate = 0.0f;  // 0: the optimizer's default, below
  float momentum = -1.0f;      // < 0: not given (0.9)
  std::int64_t log_every = 100;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string save_weights;
  std::string metrics;  // a metrics log for tools/plot; validation on the test set then
  std::string data_dir;
  bool log_placement = false;
  std::string ps_keys;            // ps-*: CURVE keys made by convoy-keygen (see --help)
  bool allow_plaintext = false;   // ps-*, multiworker*: plaintext on a non-loopback address
  std::int64_t heartbeat_ms = 0;  // ps-*: ZmqPs::heartbeat; 0: off
  std::int64_t exchange_timeout_ms = 60'000;  // multiworker*: Gloo::timeout
  bool keep_global_batch = false;             // multiworker, ps-sync: FitOptions::keep_global_batch
  std::size_t start_workers = 0;              // multiworker*: Gloo::start_workers
};

// Default learning rates, one per optimizer. Adam's, with batch 200 and 20 epochs, is the default
// run; momentum's 0.01 with 0.9 takes SGD's 0.1 step on average.
constexpr float sgd_learning_rate = 0.1f;
constexpr float momentum_learning_rate = 0.01f;
constexpr float adam_learning_rate = 0.001f;
constexpr float default_momentum = 0.9f;

// Larger widths and replica counts are refused rather than left to exhaust memory, and more
// epochs would overflow the step count.
constexpr std::size_t max_width = 65536;
constexpr int max_replicas = 256;
constexpr double max_epochs = 1e6;

constexpr std::string_view usage = R"(usage: fashion_mnist [options]
  --strategy NAME       how replicas train together (default mirrored):
                          mirrored  place::Mirrored, sync::Synchronous: every step averages all
                                    the replicas' gradients
                          central   place::CentralStorage, sync::Synchronous: the same, with one
                                    shared copy of the weights
                          async     place::Mirrored, sync::Asynchronous: each gradient is applied
                                    as soon as it is ready
                          ssp:S     place::Mirrored, sync::BoundedStaleness<S>, S in 0,1,2,4
                          sync:M    place::Mirrored, sync::Synchronous{.replicas_to_aggregate = M}:
                                    each step applies the first M gradients (M in 1..replicas)
                        a parameter-server cluster (place::Sharded<GreedyBySize>, comm::ZmqPs);
                        start every task under tools/convoy-launch, TF_CONFIG or a launcher:
                          ps-sync   sync::Synchronous; ps-sync:M aggregates the first M workers'
                          ps-async  sync::Asynchronous
                          ps-ssp:S  sync::BoundedStaleness<S>, S in 0,1,2,4
                        a multi-worker collective on CPUs (place::Mirrored, comm::Gloo; every
                        task a worker, no ps; one replica a process unless --replicas):
                          multiworker        sync::Synchronous: gradients all-reduced in buckets
                          multiworker-ssp:S  sync::BoundedStaleness<S>: weights averaged every
                                             S+1 steps
  --hidden N[,N...]     hidden layer widths, each 1..65536          (default 500)
  --batch N             global batch, split evenly over the replicas (default 200)
  --replicas N          replicas, one thread each, 0..256; 0: one per core, lowered to the
                        largest count that divides the batch         (default 0)
  --epochs X            passes over the training set, > 0            (default 20)
  --steps N             training steps instead of epochs; 0: use --epochs (default 0)
  --optimizer NAME      sgd, momentum or adam                        (default adam)
  --lr X                learning rate, > 0      (default: sgd 0.1, momentum 0.01, adam 0.001)
  --momentum X          momentum of --optimizer momentum, in [0, 1)  (default 0.9)
  --log-every N         progress line every N steps; 0: quiet        (default 100)
  --seed N              data order                                   (default 1)
  --checkpoint-dir DIR  write checkpoints there and resume from the latest one
  --checkpoint-every N  checkpoint every N steps; 0: only at the end (default 0)
  --save-weights FILE   save the trained weights by name (.bin, .pbin or .json)
  --metrics FILE        write loss, samples/s and test accuracy every --log-every steps to FILE
                        (.csv or .jsonl), for tools/plot
  --data-dir DIR        Fashion-MNIST files     (default $CONVOY_FASHION_MNIST_DIR, or
                        /usr/share/datasets/fashion-mnist)
  --ps-keys DIR         ps-*: CurveZMQ keys from convoy-keygen: DIR/ps.key and DIR/ps.pub, the
                        workers' DIR/workers/*.pub, and each worker's DIR/workers/worker<RANK>.key
  --allow-plaintext     ps-*, multiworker*: plaintext on a non-loopback address (a trusted
                        network only)
  --heartbeat-ms N      ps-*: drop and log a peer silent for N ms, 0..3600000; 0: off (default 0)
  --exchange-timeout-ms N  multiworker*: the longest wait for one exchange with the other
                        processes, 1..3600000                         (default 60000)
  --keep-global-batch   multiworker, ps-sync: when workers are lost or come back, keep the
                        global batch (split over the group) instead of each worker's
  --start-workers N     multiworker*: start once N workers, worker 0 among them, have met; the
                        others join as they come; 0: every worker      (default 0)
  --log-placement       print where every variable lives and which replica computes
  --help                print this text
Exit status: 0 on success, 2 for a bad option (one line on stderr, before any training), 1 for
an error while training.
)";

// "0, 1, 2, ..." for messages, and whether n is among them.
template <int... S>
std::string listed(std::integer_sequence<int, S...>) {
  std::string list;
  ((list += (list.empty() ? "" : ", ") + std::to_string(S)), ...);
  return list;
}

template <int... S>
bool is_listed(int n, std::integer_sequence<int, S...>) {
  return ((n == S) || ...);
}

StrategyChoice parse_strategy(std::string_view text) {
  using Kind = StrategyChoice::Kind;
  StrategyChoice choice{.text = std::string(text)};
  if (text == "mirrored") {
    choice.kind = Kind::mirrored;
  } else if (text == "central") {
    choice.kind = Kind::central;
  } else if (text == "async") {
    choice.kind = Kind::async;
  } else if (text == "ps-sync") {
    choice.kind = Kind::ps_sync;
  } else if (text == "ps-async") {
    choice.kind = Kind::ps_async;
  } else if (text == "multiworker") {
    choice.kind = Kind::multiworker;
  } else if (text.starts_with("ssp:") || text.starts_with("ps-ssp:") ||
             text.starts_with("multiworker-ssp:")) {
    choice.kind = text.starts_with("ssp:")      ? Kind::ssp
                  : text.starts_with("ps-ssp:") ? Kind::ps_ssp
                                                : Kind::multiworker_ssp;
    std::string const allowed = "S must be one of " + listed(Stalenesses{});
    auto const digits = text.substr(text.find(':') + 1);
    std::from_chars(digits.data(), digits.data() + digits.size(), choice.n);
    // S written exactly as listed: "ssp:02" and "ssp:2x" are refused like "ssp:99".
    bool const known = digits == std::to_string(choice.n) && is_listed(choice.n, Stalenesses{});
    if (!known) bad_value("--strategy", text, allowed);
  } else if (text.starts_with("sync:") || text.starts_with("ps-sync:")) {
    choice.kind = text.starts_with("sync:") ? Kind::sync : Kind::ps_sync;
    std::string_view const m = text.substr(text.find(':') + 1);
    std::string const expected = "M must be a whole number from 1 to the replica count";
    try {
      choice.n = parse_integer<int>("--strategy", m, 1, std::numeric_limits<int>::max(), expected);
    } catch (UsageError const&) {
      bad_value("--strategy", text, expected);
    }
  } else {
    bad_value("--strategy", text,
              "expected mirrored, central, async, ssp:S, sync:M, ps-sync, ps-sync:M, ps-async, "
              "ps-ssp:S, multiworker or multiworker-ssp:S");
  }
  return choice;
}

std::vector<std::size_t> parse_widths(std::string_view text) {
  std::vector<std::size_t> widths;
  std::string_view rest = text;
  std::string_view const expected = "expected widths from 1 to 65536, comma-separated";
  while (true) {
    auto const comma = rest.find(',');
    try {
      widths.push_back(
          parse_integer<std::size_t>("--hidden", rest.substr(0, comma), 1, max_width, expected));
    } catch (UsageError const&) {
      bad_value("--hidden", text, expected);  // the whole list, not just the bad item
    }
    if (comma == std::string_view::npos) return widths;
    rest.remove_prefix(comma + 1);
  }
}

// Reads every option; throws UsageError for the first bad one. Paths are checked afterwards, in
// check_paths().
Options parse(int argc, char** argv) {
  Options o;
  bool momentum_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg = argv[i];
    auto value = [&]() -> std::string_view {
      // A following option is a forgotten value, not a value: "--checkpoint-dir --steps 10".
      if (i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--")) {
        throw UsageError(std::string(arg) + " needs a value");
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (arg == "--strategy") {
      o.strategy = parse_strategy(value());
    } else if (arg == "--hidden") {
      o.hidden = parse_widths(value());
    } else if (arg == "--keep-global-batch") {
      o.keep_global_batch = true;
    } else if (arg == "--batch") {
      o.batch = parse_integer<std::size_t>(arg, value(), 1, std::numeric_limits<int>::max(),
                                           "expected a whole number >= 1");
    } else if (arg == "--replicas") {
      o.replicas = parse_integer<int>(arg, value(), 0, max_replicas,
                                      "expected a whole number from 0 to 256 (0: one per core)");
    } else if (arg == "--steps") {
      o.steps =
          parse_integer<std::int64_t>(arg, value(), 0, std::numeric_limits<std::int64_t>::max(),
                                      "expected a whole number >= 0 (0: use --epochs)");
    } else if (arg == "--epochs") {
      o.epochs = parse_real(
          arg, value(), [](double x) { return x > 0.0 && x <= max_epochs; },
          "expected a number > 0 and at most 1e6");
    } else if (arg == "--optimizer") {
      o.optimizer = value();
      if (o.optimizer != "sgd" && o.optimizer != "momentum" && o.optimizer != "adam") {
        bad_value(arg, o.optimizer, "expected sgd, momentum or adam");
      }
    } else if (arg == "--lr") {
      o.learning_rate = static_cast<float>(parse_real(
          arg, value(),
          [](double x) {
            return x > 0.0 && x <= std::numeric_limits<float>::max() &&
                   static_cast<float>(x) > 0.0f;
          },
          "expected a finite number > 0"));
    } else if (arg == "--momentum") {
      momentum_given = true;
      o.momentum = static_cast<float>(parse_real(
          arg, value(), [](double x) { return x >= 0.0 && x < 1.0; },
          "expected a number from 0 to below 1"));
    } else if (arg == "--log-every") {
      o.log_every =
          parse_integer<std::int64_t>(arg, value(), 0, std::numeric_limits<std::int64_t>::max(),
                                      "expected a whole number >= 0 (0: quiet)");
    } else if (arg == "--seed") {
      o.seed =
          parse_integer<std::uint64_t>(arg, value(), 0, std::numeric_limits<std::uint64_t>::max(),
                                       "expected a whole number >= 0");
    } else if (arg == "--checkpoint-dir") {
      o.checkpoint_dir = value();
    } else if (arg == "--checkpoint-every") {
      o.checkpoint_every =
          parse_integer<std::int64_t>(arg, value(), 0, std::numeric_limits<std::int64_t>::max(),
                                      "expected a whole number >= 0 (0: only at the end)");
    } else if (arg == "--save-weights") {
      o.save_weights = value();
    } else if (arg == "--metrics") {
      o.metrics = value();
    } else if (arg == "--data-dir") {
      o.data_dir = value();
    } else if (arg == "--ps-keys") {
      o.ps_keys = value();
    } else if (arg == "--allow-plaintext") {
      o.allow_plaintext = true;
    } else if (arg == "--exchange-timeout-ms") {
      o.exchange_timeout_ms = parse_integer<std::int64_t>(arg, value(), 1, 3'600'000,
                                                          "expected a whole number from 1 to 3600000");
    } else if (arg == "--start-workers") {
      o.start_workers = parse_integer<std::size_t>(arg, value(), 0, 4096,
                                                   "expected a whole number from 0 to 4096");
    } else if (arg == "--heartbeat-ms") {
      o.heartbeat_ms = parse_integer<std::int64_t>(arg, value(), 0, 3'600'000,
                                                   "expected a whole number from 0 to 3600000");
    } else if (arg == "--log-placement") {
      o.log_placement = true;
    } else if (arg.starts_with("-")) {
      throw UsageError("unknown option '" + std::string(arg) + "' (see --help)");
    } else {
      throw UsageError("unexpected argument '" + std::string(arg) + "' (see --help)");
    }
  }
  if (momentum_given && o.optimizer != "momentum") {
    throw UsageError("--momentum applies to --optimizer momentum only, not " + o.optimizer);
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    throw UsageError("--checkpoint-every needs --checkpoint-dir");
  }
  return o;
}

// Every path is checked before the data is read and training starts, so a run cannot fail at
// its end for want of a writable directory.
void check_paths(Options const& o) {
  if (!o.data_dir.empty()) examples::require_readable_dir("--data-dir", o.data_dir);
  if (!o.checkpoint_dir.empty())
    examples::require("--checkpoint-dir", o.checkpoint_dir, [&] {
      convoy::io::require_writable_directory(o.checkpoint_dir, "checkpoint directory");
    });
  if (!o.save_weights.empty()) {
    examples::require("--save-weights", o.save_weights, [&] {
      convoy::io::require_writable_file(o.save_weights, "weights file", true);
    });
  }
  if (!o.ps_keys.empty()) examples::require_readable_dir("--ps-keys", o.ps_keys);
  if (!o.metrics.empty()) {
    examples::require("--metrics", o.metrics, [&] {
      convoy::callbacks::metrics_format_for(o.metrics);
      convoy::io::require_writable_file(o.metrics, "metrics file", false);
    });
  }
}

// --replicas 0 means one per core; where the cores do not divide the batch, the largest count
// below that does, so the default batch runs on any machine.
int resolve_replicas(Options const& o) {
  using Kind = StrategyChoice::Kind;
  bool const multiworker =
      o.strategy.kind == Kind::multiworker || o.strategy.kind == Kind::multiworker_ssp;
  if (multiworker && o.replicas == 0) return 1;  // the processes share the cores
  if (o.replicas > 0) {
    if (o.batch % static_cast<std::size_t>(o.replicas) != 0) {
      bad_value("--batch", std::to_string(o.batch),
                "does not split evenly over " + std::to_string(o.replicas) +
                    " replicas (--replicas); pick a multiple of " + std::to_string(o.replicas));
    }
    return o.replicas;
  }
  int const cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int replicas = std::min(cores, max_replicas);
  while (o.batch % static_cast<std::size_t>(replicas) != 0) --replicas;
  return replicas;
}

convoy::optim::Optimizer make_optimizer(Options const& o) {
  auto const lr = [&](float fallback) { return o.learning_rate > 0 ? o.learning_rate : fallback; };
  if (o.optimizer == "sgd") return convoy::optim::Sgd{.learning_rate = lr(sgd_learning_rate)};
  if (o.optimizer == "adam") return convoy::optim::Adam{.learning_rate = lr(adam_learning_rate)};
  return convoy::optim::Momentum{.learning_rate = lr(momentum_learning_rate),
                                 .momentum = o.momentum >= 0 ? o.momentum : default_momentum};
}

// The data, read after every option has been checked. With --data-dir, data that cannot be read
// is a usage error naming the option; without it, the library's error stands.
struct Data {
  convoy::io::Dataset train, test;
};

Data load(Options const& o) {
  try {
    auto const dir = o.data_dir.empty() ? convoy::io::default_fashion_mnist_dir()
                                        : std::filesystem::path(o.data_dir);
    Data data{convoy::io::load_fashion_mnist(convoy::io::Split::train, dir),
              convoy::io::load_fashion_mnist(convoy::io::Split::test, dir)};
    if (o.batch > data.train.rows()) {
      bad_value("--batch", std::to_string(o.batch),
                "larger than the training set (" + std::to_string(data.train.rows()) + " rows)");
    }
    return data;
  } catch (convoy::Error const& e) {
    if (o.data_dir.empty()) throw;
    bad_value("--data-dir", o.data_dir, e.what());
  }
}

// The training code, written once for every strategy type: fit, evaluate, save.
template <class Strategy>
int train(Options const& o, convoy::Trainer<Strategy>& trainer, Data const& data) {
  using Placement = typename Strategy::placement_type;
  using Sync = typename Strategy::sync_type;
  if (trainer.strategy().serves()) {  // a parameter server: fit serves until every worker is done
    std::cout << "convoy " << convoy::version << ": serving a shard of the model's variables to "
              << trainer.strategy().replicas() << " worker(s), strategy " << o.strategy.text
              << "\n";
    trainer.fit(data.train, {.steps = o.steps, .epochs = o.epochs, .batch_size = o.batch});
    return 0;
  }
  std::cout << "convoy " << convoy::version << ": training " << data.train.name << " ("
            << data.train.rows() << " examples) on " << trainer.strategy().replicas()
            << " replica(s), batch " << o.batch << ", strategy " << o.strategy.text << " ("
            << Placement::name << ", " << Strategy::comm_type::name << ", " << Sync::name << ")\n"
            << "host math: " << convoy::math::host_blas_kernels().describe() << "\n";
  convoy::FitOptions fit{.steps = o.steps,
                         .epochs = o.epochs,
                         .batch_size = o.batch,
                         .keep_global_batch = o.keep_global_batch,
                         .log_every = o.log_every,
                         .log_format = convoy::LogFormat::tensorflow,
                         .seed = o.seed,
                         .checkpoint_dir = o.checkpoint_dir,
                         .checkpoint_every = o.checkpoint_every};
  if (!o.metrics.empty()) {  // a row every --log-every steps, with the test set's accuracy
    fit.validation = &data.test;
    fit.evaluate_every = o.log_every;
    fit.hooks.push_back(convoy::callbacks::metrics_log(o.metrics));
  }
  auto const result = trainer.fit(data.train, fit);
  auto const metrics = trainer.evaluate(data.test);
  if (!o.save_weights.empty() && trainer.strategy().chief()) {
    trainer.save_weights(o.save_weights);
    std::cout << "weights saved to " << o.save_weights << "\n";
  }
  std::cout << "trained " << result.global_step << " global steps in " << result.seconds << " s\n"
            << "test loss: " << metrics.mean_loss() << "\n"
            << "samples/sec: " << result.samples_per_second << "\n"
            << "test accuracy: " << metrics.accuracy() << "\n";
  return 0;
}

std::vector<std::size_t> layer_sizes(Options const& o, std::size_t inputs) {
  std::vector<std::size_t> sizes{inputs};
  sizes.insert(sizes.end(), o.hidden.begin(), o.hidden.end());
  sizes.push_back(10);
  return sizes;
}

// The default strategy, --strategy mirrored, as a program that uses only it would write it.
int train_mirrored(Options const& o, std::vector<std::size_t> const& sizes) {
  // example-begin strategy
  using Strategy = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored,
                                    convoy::comm::InProcess, convoy::sync::Synchronous>;
  convoy::Trainer<Strategy> trainer{
      Strategy{convoy::nn::Mlp{sizes}, {.replicas = o.replicas, .log_placement = o.log_placement}},
      make_optimizer(o)};
  // example-end strategy
  return train(o, trainer, load(o));
}

// Any other strategy: the same placement values, and the synchronization value from --strategy.
// The library checks that value against the replica count as it builds the strategy; what it
// refuses came from the command line.
template <class Strategy>
int train_as(Options const& o, std::vector<std::size_t> const& sizes,
             typename Strategy::sync_type sync = {}) {
  auto build = [&] {
    try {
      return Strategy{convoy::nn::Mlp{sizes},
                      {.replicas = o.replicas, .log_placement = o.log_placement},
                      convoy::comm::InProcess{},
                      sync};
    } catch (convoy::Error const& e) {
      bad_value("--strategy", o.strategy.text, e.what());
    }
  };
  convoy::Trainer<Strategy> trainer{build(), make_optimizer(o)};
  return train(o, trainer, load(o));
}

template <class Placement, class Sync>
using MlpStrategy = convoy::Strategy<convoy::nn::Mlp, Placement, convoy::comm::InProcess, Sync>;

// --strategy ssp:S and ps-ssp:S to BoundedStaleness<S>: one type per listed S, each trained by
// `train.template operator()<S>()`.
template <int... S, class Train>
int for_staleness(Options const& o, std::integer_sequence<int, S...>, Train train) {
  int status = 2;  // parse_strategy admits only the listed S
  auto train_if = [&]<int Staleness>() {
    if (o.strategy.n != Staleness) return false;
    status = train.template operator()<Staleness>();
    return true;
  };
  static_cast<void>((train_if.template operator()<S>() || ...));
  return status;
}

// The cluster's security from --ps-keys and --allow-plaintext (docs/parameter_server.md#security):
// each task reads only its own files, so every task gets the same options.
convoy::comm::ZmqPs ps_comm(Options const& o) {
  convoy::comm::ZmqPs comm;
  comm.heartbeat = std::chrono::milliseconds(o.heartbeat_ms);
  comm.security.allow_plaintext = o.allow_plaintext;
  if (o.ps_keys.empty()) return comm;
  std::filesystem::path const dir = o.ps_keys;
  auto const rank = convoy::Cluster::from_environment().worker_rank();
  comm.security.server_secret_key = dir / "ps.key";
  comm.security.server_public_key = dir / "ps.pub";
  comm.security.authorized_keys = dir / "workers";
  if (rank >= 0) {
    comm.security.client_secret_key = dir / "workers" / ("worker" + std::to_string(rank) + ".key");
  }
  return comm;
}

// --strategy ps-*: the same model over a parameter-server cluster; only the type line differs.
template <class Sync>
int train_ps(Options const& o, std::vector<std::size_t> const& sizes, Sync sync = {}) {
  // example-begin ps-strategy
  using Strategy =
      convoy::Strategy<convoy::nn::Mlp, convoy::place::Sharded<>, convoy::comm::ZmqPs, Sync>;
  // example-end ps-strategy
  auto build = [&] {
    // Only what --strategy chose (ps-sync:M against the cluster's workers) is a usage error; the
    // library's errors about the cluster's addresses, keys or plaintext stand as they are.
    auto comm = ps_comm(o);
    comm.cluster = convoy::Cluster::from_environment();
    try {
      sync.check(comm.cluster->worker_count());
    } catch (convoy::Error const& e) {
      bad_value("--strategy", o.strategy.text, e.what());
    }
    return Strategy{convoy::nn::Mlp{sizes}, {.log_placement = o.log_placement}, comm, sync};
  };
  convoy::Trainer<Strategy> trainer{build(), make_optimizer(o)};
  return train(o, trainer, load(o));
}

// --strategy multiworker and multiworker-ssp:S: the same model as a collective of worker
// processes on CPUs; only the type line differs.
template <class Sync>
int train_multiworker([[maybe_unused]] Options const& o,
                      [[maybe_unused]] std::vector<std::size_t> const& sizes) {
#if defined(CONVOY_WITH_GLOO)
  // example-begin multiworker-strategy
  using Strategy =
      convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, convoy::comm::Gloo, Sync>;
  // example-end multiworker-strategy
  auto build = [&] {
    try {
      return Strategy{convoy::nn::Mlp{sizes},
                      {.replicas = o.replicas, .log_placement = o.log_placement},
                      convoy::comm::Gloo{.timeout = std::chrono::milliseconds(o.exchange_timeout_ms),
                                         .start_workers = o.start_workers,
                                         .allow_plaintext = o.allow_plaintext}};
    } catch (convoy::ClusterError const&) {
      throw;
    } catch (convoy::TimeoutError const&) {
      throw;
    } catch (convoy::Error const& e) {
      bad_value("--strategy", o.strategy.text, e.what());
    }
  };
  convoy::Trainer<Strategy> trainer{build(), make_optimizer(o)};
  return train(o, trainer, load(o));
#else
  bad_value("--strategy", o.strategy.text,
            "this build has no convoy::gloo (install libgloo-dev and reconfigure)");
#endif
}

// --strategy NAME to its type.
int dispatch(Options const& o, std::vector<std::size_t> const& sizes) {
  namespace place = convoy::place;
  namespace sync = convoy::sync;
  using Kind = StrategyChoice::Kind;
  switch (o.strategy.kind) {
    case Kind::mirrored:
      return train_mirrored(o, sizes);
    case Kind::central:
      return train_as<MlpStrategy<place::CentralStorage, sync::Synchronous>>(o, sizes);
    case Kind::async:
      return train_as<MlpStrategy<place::Mirrored, sync::Asynchronous>>(o, sizes);
    case Kind::sync:
      return train_as<MlpStrategy<place::Mirrored, sync::Synchronous>>(
          o, sizes, sync::Synchronous{.replicas_to_aggregate = o.strategy.n});
    case Kind::ssp:
      return for_staleness(o, Stalenesses{}, [&]<int S>() {
        return train_as<MlpStrategy<place::Mirrored, sync::BoundedStaleness<S>>>(o, sizes);
      });
    case Kind::ps_sync:
      return train_ps(o, sizes, sync::Synchronous{.replicas_to_aggregate = o.strategy.n});
    case Kind::ps_async:
      return train_ps<sync::Asynchronous>(o, sizes);
    case Kind::ps_ssp:
      return for_staleness(o, Stalenesses{},
                           [&]<int S>() { return train_ps<sync::BoundedStaleness<S>>(o, sizes); });
    case Kind::multiworker:
      return train_multiworker<sync::Synchronous>(o, sizes);
    case Kind::multiworker_ssp:
      return for_staleness(o, Stalenesses{}, [&]<int S>() {
        return train_multiworker<sync::BoundedStaleness<S>>(o, sizes);
      });
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    check_paths(o);
    o.replicas = resolve_replicas(o);
    constexpr std::size_t pixels = 28 * 28;  // every Fashion-MNIST image
    return dispatch(o, layer_sizes(o, pixels));
  } catch (UsageError const& e) {
    std::cerr << "fashion_mnist: " << e.what() << "\n";
    return 2;
  } catch (convoy::Error const& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (std::exception const& e) {
    std::cerr << "fashion_mnist: " << e.what() << "\n";
    return 1;
  }
}
