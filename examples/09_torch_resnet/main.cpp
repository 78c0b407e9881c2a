// 09_torch_resnet: a residual network written in LibTorch, trained on Fashion-MNIST by convoy's
// Trainer under the strategy --strategy names; the model code never changes.
//
// What it shows: the distribution layer LibTorch's C++ API lacks. ResNet (resnet.hpp) is plain
// LibTorch (a stem, three stages of one residual block each, 16, 32 and 64 channels,
// conv-BatchNorm-ReLU twice with an identity or projection shortcut, global average pooling, a
// dense classifier, as the third source text builds it). libtorch::Model<ResNet> makes it a convoy
// model, and the strategy is one type line: Mirrored replicas, CentralStorage, one GPU, or a
// parameter-server cluster, synchronous or asynchronous. Weights files and checkpoints speak
// LibTorch's names ("stage2.conv1.weight"); BatchNorm's running statistics travel with them, and
// --save-weights model.pt writes LibTorch's own archive, which torch::load reads.
//
// Run:   build/examples/torch_resnet                     (6 epochs, Mirrored, one replica a core)
//        build/examples/torch_resnet --strategy central --steps 200
//        build-torch2/examples/torch_resnet --strategy gpu   (a CUDA LibTorch, convoy::cuda)
//        tools/convoy-launch --ps 1 --workers 2 -- build/examples/torch_resnet --strategy ps-sync
// Needs: LibTorch (Debian's libtorch-dev) and Debian's dataset-fashion-mnist package; for a GPU,
//        a LibTorch built with CUDA (PyPI's wheel: tools/dev build torch2), which compiles this
//        file as CUDA with convoy::cuda.
// Expect: progress lines, then "test accuracy: 0.91" or more with the defaults (6 epochs, Adam
//         with a cosine decay), in about 4 min on 2 cores, and where the time went. A bad option
//         ends at once with one line on stderr and exit status 2; an error while training, with
//         status 1.
#include <chrono>
#include <convoy/comm/gloo.hpp>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <convoy/torch/model.hpp>
#include <convoy/torch/trained_weights.hpp>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <thread>

#include "../common/options.hpp"
#include "resnet.hpp"

namespace {

using examples::bad_value;
using examples::parse_integer;
using examples::parse_real;
using examples::ResNet;
using examples::UsageError;

struct Options {
  std::string strategy = "mirrored";
  std::size_t batch = 128;
  int replicas = 0;  // 0: one per core
  std::int64_t steps = 0;
  double epochs = 6.0;
  float learning_rate = 0.002f;  // Adam
  std::int64_t log_every = 100;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string save_weights;
  std::string metrics;
  std::string data_dir;
};

constexpr std::string_view usage = R"(usage: torch_resnet [options]
  --strategy NAME       mirrored (place::Mirrored), central (place::CentralStorage), gpu
                        (place::Gpu: one GPU, the local rank's; the host, saying why, where
                        there is none), all comm::InProcess and sync::Synchronous; ps-sync or
                        ps-async (place::Sharded<>, comm::ZmqPs); multiworker (place::Mirrored,
                        comm::Gloo, sync::Synchronous: worker processes, no ps, one replica
                        each unless --replicas); every task of a cluster started by
                        tools/convoy-launch, TF_CONFIG or a launcher  (default mirrored)
  --batch N             global batch, split evenly over the replicas (default 128)
  --replicas N          replicas, one thread each, 0..64; 0: one per core (default 0)
  --epochs X            passes over the training set, > 0            (default 6)
  --steps N             training steps instead of epochs; 0: use --epochs (default 0)
  --lr X                Adam's first learning rate, > 0, decayed to 0 by a cosine over
                        the run where the strategy can change it (default 0.002)
  --log-every N         progress line every N steps; 0: quiet        (default 100)
  --seed N              data order and initial weights              (default 1)
  --checkpoint-dir DIR  write checkpoints there and resume from the latest one
  --checkpoint-every N  checkpoint every N steps; 0: only at the end (default 0)
  --save-weights FILE   save the trained weights by LibTorch's names: .pt (LibTorch's
                        torch::load reads it into a ResNet), .bin, .pbin or .json
  --metrics FILE        loss, samples/s and test accuracy every --log-every steps (.csv, .jsonl)
  --data-dir DIR        Fashion-MNIST files     (default $CONVOY_FASHION_MNIST_DIR, or
                        /usr/share/datasets/fashion-mnist)
  --help                print this text
)";

Options parse(int argc, char** argv) {
  Options o;
  auto const whole = [](std::string_view flag, std::string_view v) {
    return parse_integer<std::int64_t>(flag, v, 0, std::numeric_limits<std::int64_t>::max(),
                                       "expected a whole number >= 0");
  };
  examples::parse_flags(argc, argv, usage, [&](std::string_view flag, std::string_view v) {
    if (flag == "--strategy") {
      if (v != "mirrored" && v != "central" && v != "gpu" && v != "ps-sync" && v != "ps-async" &&
          v != "multiworker")
        bad_value(flag, v, "expected mirrored, central, gpu, ps-sync, ps-async or multiworker");
      o.strategy = v;
    } else if (flag == "--batch") {
      o.batch = parse_integer<std::size_t>(flag, v, 1, 1 << 20, "expected a whole number >= 1");
    } else if (flag == "--replicas") {
      o.replicas = parse_integer<int>(flag, v, 0, 64, "expected a whole number from 0 to 64");
    } else if (flag == "--epochs") {
      o.epochs = parse_real(
          flag, v, [](double x) { return x > 0 && x <= 1e6; },
          "expected a number > 0 and at most 1e6");
    } else if (flag == "--steps") {
      o.steps = whole(flag, v);
    } else if (flag == "--lr") {
      o.learning_rate = static_cast<float>(parse_real(
          flag, v, [](double x) { return x > 0 && x < 1e3; }, "expected a number > 0"));
    } else if (flag == "--log-every") {
      o.log_every = whole(flag, v);
    } else if (flag == "--seed") {
      o.seed = static_cast<std::uint64_t>(whole(flag, v));
    } else if (flag == "--checkpoint-dir") {
      o.checkpoint_dir = v;
    } else if (flag == "--checkpoint-every") {
      o.checkpoint_every = whole(flag, v);
    } else if (flag == "--save-weights") {
      o.save_weights = v;
    } else if (flag == "--metrics") {
      o.metrics = v;
    } else if (flag == "--data-dir") {
      o.data_dir = v;
    } else {
      return false;
    }
    return true;
  });
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    throw UsageError("--checkpoint-every needs --checkpoint-dir");
  if (!o.data_dir.empty()) examples::require_readable_dir("--data-dir", o.data_dir);
  if (!o.checkpoint_dir.empty())
    examples::require("--checkpoint-dir", o.checkpoint_dir, [&] {
      convoy::io::require_writable_directory(o.checkpoint_dir, "checkpoint directory");
    });
  if (!o.save_weights.empty())
    examples::require("--save-weights", o.save_weights,
                      [&] { convoy::libtorch::require_writable_weights_file(o.save_weights); });
  if (!o.metrics.empty())
    examples::require("--metrics", o.metrics, [&] {
      convoy::callbacks::metrics_format_for(o.metrics);
      convoy::io::require_writable_file(o.metrics, "metrics file", false);
    });
  if (o.strategy == "gpu") {
    if (o.replicas > 1) bad_value("--replicas", std::to_string(o.replicas), "gpu has one replica");
    o.replicas = 1;
  } else if (o.replicas == 0 && o.strategy == "multiworker") {
    o.replicas = 1;              // the worker processes share the cores
  } else if (o.replicas == 0) {  // one per core, lowered until it divides the batch
    o.replicas = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    while (o.batch % static_cast<std::size_t>(o.replicas) != 0) --o.replicas;
  } else if (o.batch % static_cast<std::size_t>(o.replicas) != 0) {
    bad_value("--batch", std::to_string(o.batch),
              "does not split evenly over " + std::to_string(o.replicas) + " replicas");
  }
  return o;
}

// example-begin torch-model
// The model convoy trains: the module's factory, the shape of one row (a Batch's 784 features
// become {rows, 1, 28, 28} without a copy), and the default loss, cross-entropy on the labels.
using Model = convoy::libtorch::Model<ResNet>;
Model make_model(std::uint64_t seed) {
  torch::manual_seed(seed);
  return Model([] { return ResNet(); }, {.row_shape = {1, 28, 28}});
}
// example-end torch-model

struct Data {
  convoy::io::Dataset train, test;
};
Data load(Options const& o) {
  auto const dir = o.data_dir.empty() ? convoy::io::default_fashion_mnist_dir()
                                      : std::filesystem::path(o.data_dir);
  return {convoy::io::load_fashion_mnist(convoy::io::Split::train, dir),
          convoy::io::load_fashion_mnist(convoy::io::Split::test, dir)};
}

// The training code, written once for every strategy. `decay`: the learning rate follows a
// cosine to 0 over the run (a parameter server's shards keep the rate they started with).
template <class Strategy>
int train(Options const& o, Strategy strategy, bool decay) {
  convoy::Trainer<Strategy> trainer{std::move(strategy),
                                    convoy::optim::Adam{.learning_rate = o.learning_rate}};
  auto const started = std::chrono::steady_clock::now();
  Data const data = load(o);
  double const load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (trainer.strategy().serves()) {  // a ps task: serve until every worker is done
    std::cout << "convoy " << convoy::version << ": serving a shard of the ResNet's variables\n";
    trainer.fit(data.train, {.steps = o.steps, .epochs = o.epochs, .batch_size = o.batch});
    return 0;
  }
  std::cout << "convoy " << convoy::version << ": training a LibTorch ResNet ("
            << trainer.strategy().layout().element_count() << " values in "
            << trainer.strategy().layout().size() << " variables) on " << data.train.name << ", "
            << trainer.strategy().replicas() << " replica(s), batch " << o.batch << ", strategy "
            << o.strategy << "\n";
  // Where a step's time goes: the replicas' forward and backward passes, against the whole.
  double compute_seconds = 0.0;
  std::int64_t reports = 0;
  convoy::FitOptions fit{.steps = o.steps,
                         .epochs = o.epochs,
                         .batch_size = o.batch,
                         .log_every = o.log_every,
                         .log_format = convoy::LogFormat::tensorflow,
                         .seed = o.seed,
                         .checkpoint_dir = o.checkpoint_dir,
                         .checkpoint_every = o.checkpoint_every};
  fit.callbacks.push_back([&](convoy::StepReport const& r) {
    compute_seconds += r.seconds;
    ++reports;
    return true;
  });
  if (decay) {
    auto const steps =
        o.steps > 0 ? o.steps
                    : static_cast<std::int64_t>(o.epochs * static_cast<double>(data.train.rows()) /
                                                static_cast<double>(o.batch));
    fit.hooks.push_back(convoy::callbacks::learning_rate_schedule(
        convoy::callbacks::cosine(o.learning_rate, std::max<std::int64_t>(steps, 1))));
  }
  if (!o.metrics.empty()) {
    fit.validation = &data.test;
    fit.evaluate_every = o.log_every;
    fit.hooks.push_back(convoy::callbacks::metrics_log(o.metrics));
  }
  auto const result = trainer.fit(data.train, fit);
  auto const evaluated = std::chrono::steady_clock::now();
  auto const metrics = trainer.evaluate(data.test);
  double const evaluate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - evaluated).count();
  // example-begin torch-save-weights
  // libtorch::save_weights rather than trainer.save_weights: a "model.pt" is LibTorch's own
  // archive, which torch::load(module, "model.pt") reads, and convoy.hpp knows nothing of LibTorch.
  if (!o.save_weights.empty() && trainer.strategy().chief()) {
    convoy::libtorch::save_weights(trainer, o.save_weights);
    std::cout << "weights saved to " << o.save_weights << " (LibTorch's names)\n";
  }
  // example-end torch-save-weights
  double const per_step = reports ? compute_seconds / static_cast<double>(reports) : 0.0;
  // Per step of this task's own (a cluster's worker hears only of its own updates; under
  // Asynchronous the global step counts every worker's).
  double const step_wall = reports ? result.seconds / static_cast<double>(reports) : 0.0;
  std::cout << std::fixed << std::setprecision(1) << "where the time went: " << load_seconds
            << " s reading the data, " << result.seconds
            << " s training (a step: " << per_step * 1e3
            << " ms of forward and backward per replica, " << (step_wall - per_step) * 1e3
            << " ms of exchange, update and waiting), " << evaluate_seconds
            << " s evaluating the test set\n"
            << std::setprecision(4) << "trained " << result.global_step << " global steps in "
            << result.seconds << " s\n"
            << "samples/sec: " << result.samples_per_second << "\n"
            << "test loss: " << metrics.mean_loss() << "\n"
            << "test accuracy: " << metrics.accuracy() << "\n";
  return 0;
}

// --strategy NAME to its type: one type line each, the model untouched.
int dispatch(Options const& o) {
  namespace place = convoy::place;
  namespace comm = convoy::comm;
  namespace sync = convoy::sync;
  place::Mirrored const threads{.replicas = o.replicas};
  // example-begin torch-strategies
  if (o.strategy == "mirrored") {
    using Strategy = convoy::Strategy<Model, place::Mirrored, comm::InProcess, sync::Synchronous>;
    return train(o, Strategy{make_model(o.seed), threads}, true);
  }
  if (o.strategy == "central") {
    using Strategy =
        convoy::Strategy<Model, place::CentralStorage, comm::InProcess, sync::Synchronous>;
    return train(o, Strategy{make_model(o.seed), {.replicas = o.replicas}}, true);
  }
  if (o.strategy == "gpu") {
    using Strategy = convoy::Strategy<Model, place::Gpu, comm::InProcess, sync::Synchronous>;
    return train(o, Strategy{make_model(o.seed), place::Gpu{.log_placement = true}}, true);
  }
  if (o.strategy == "multiworker") {
#if defined(CONVOY_WITH_GLOO)
    using Strategy = convoy::Strategy<Model, place::Mirrored, comm::Gloo, sync::Synchronous>;
    return train(o, Strategy{make_model(o.seed), threads}, true);
#else
    bad_value("--strategy", o.strategy, "this build has no convoy::gloo (libgloo-dev)");
#endif
  }
  if (o.strategy == "ps-sync") {
    using Strategy = convoy::Strategy<Model, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;
    return train(o, Strategy{make_model(o.seed)}, false);
  }
  using Strategy = convoy::Strategy<Model, place::Sharded<>, comm::ZmqPs, sync::Asynchronous>;
  return train(o, Strategy{make_model(o.seed)}, false);
  // example-end torch-strategies
}

}  // namespace

int main(int argc, char** argv) {
  return examples::run_main("torch_resnet", [&] { return dispatch(parse(argc, argv)); });
}
