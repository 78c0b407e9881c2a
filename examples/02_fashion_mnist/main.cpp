// 02_fashion_mnist: train the 784-500-10 MLP on Fashion-MNIST with the default strategy.
//
// What it shows: the whole user program of DESIGN.md. The model (nn::Mlp), the strategy
// (Mirrored replicas, in-process communication, synchronous updates: one replica per core) and the
// Trainer are picked here; swapping the three policy arguments is all it takes to train the same
// model another way. Each replica trains on its own slice of every global batch; their gradients
// are averaged by a reduce-scatter/all-gather over shared memory, so N replicas take exactly the
// step one replica would take on the whole batch.
//
// Run:   build/examples/fashion_mnist                (defaults: 5 epochs, batch 100, lr 0.1)
//        build/examples/fashion_mnist --steps 200 --replicas 1 --log-placement
//        build/examples/fashion_mnist --help
// Needs: Debian's dataset-fashion-mnist package (or --data-dir / CONVOY_FASHION_MNIST_DIR).
// Expect: progress lines "After N training steps (M global steps), loss on training batch is ..."
//         and, at the end, "test accuracy: 0.87..." (at least 0.85 with the defaults).
#include <convoy/convoy.hpp>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Options {
  std::vector<std::size_t> hidden{500};
  std::size_t batch = 100;
  int replicas = 0;  // 0: one per core
  std::int64_t steps = 0;
  double epochs = 5.0;
  float learning_rate = 0.1f;
  std::string optimizer = "sgd";
  std::int64_t log_every = 100;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;
  std::string save_weights;
  std::string data_dir;
  bool log_placement = false;
};

constexpr std::string_view usage = R"(usage: fashion_mnist [options]
  --hidden N[,N...]       hidden layer widths            (default 500)
  --batch N               global batch, split over the replicas (default 100)
  --replicas N            replicas, one per thread; 0 = one per core (default 0)
  --steps N               training steps; overrides --epochs
  --epochs X              passes over the training set   (default 5)
  --lr X                  learning rate                  (default 0.1)
  --optimizer NAME        sgd, momentum or adam          (default sgd)
  --log-every N           progress line every N steps    (default 100; 0 = quiet)
  --seed N                data order                     (default 1)
  --checkpoint-dir DIR    write checkpoints there and resume from the latest one
  --checkpoint-every N    checkpoint every N steps       (default: only at the end)
  --save-weights FILE     save the trained weights by name (.bin, .pbin or .json)
  --data-dir DIR          Fashion-MNIST files            (default /usr/share/datasets/fashion-mnist)
  --log-placement         print where every variable lives and which replica computes
)";

Options parse(int argc, char** argv) {
  Options o;
  auto fail = [](std::string const& message) {
    std::cerr << "fashion_mnist: " << message << "\n" << usage;
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(std::string(arg) + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "--help" || arg == "-h") {
        std::cout << usage;
        std::exit(0);
      } else if (arg == "--hidden") {
        o.hidden.clear();
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) o.hidden.push_back(std::stoul(item));
      } else if (arg == "--batch") {
        o.batch = std::stoul(value());
      } else if (arg == "--replicas") {
        o.replicas = std::stoi(value());
      } else if (arg == "--steps") {
        o.steps = std::stoll(value());
      } else if (arg == "--epochs") {
        o.epochs = std::stod(value());
      } else if (arg == "--lr") {
        o.learning_rate = std::stof(value());
      } else if (arg == "--optimizer") {
        o.optimizer = value();
      } else if (arg == "--log-every") {
        o.log_every = std::stoll(value());
      } else if (arg == "--seed") {
        o.seed = std::stoull(value());
      } else if (arg == "--checkpoint-dir") {
        o.checkpoint_dir = value();
      } else if (arg == "--checkpoint-every") {
        o.checkpoint_every = std::stoll(value());
      } else if (arg == "--save-weights") {
        o.save_weights = value();
      } else if (arg == "--data-dir") {
        o.data_dir = value();
      } else if (arg == "--log-placement") {
        o.log_placement = true;
      } else {
        fail("unknown option " + std::string(arg));
      }
    } catch (std::logic_error const&) {
      fail("bad value for " + std::string(arg));
    }
  }
  return o;
}

convoy::optim::Optimizer make_optimizer(Options const& o) {
  if (o.optimizer == "sgd") return convoy::optim::Sgd{.learning_rate = o.learning_rate};
  if (o.optimizer == "momentum") return convoy::optim::Momentum{.learning_rate = o.learning_rate};
  if (o.optimizer == "adam") return convoy::optim::Adam{.learning_rate = o.learning_rate};
  std::cerr << "fashion_mnist: unknown optimizer '" << o.optimizer << "' (sgd, momentum or adam)\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) try {
  Options const o = parse(argc, argv);
  auto const dir = o.data_dir.empty() ? convoy::io::default_fashion_mnist_dir()
                                      : std::filesystem::path(o.data_dir);
  auto const train = convoy::io::load_fashion_mnist(convoy::io::Split::train, dir);
  auto const test = convoy::io::load_fashion_mnist(convoy::io::Split::test, dir);

  std::vector<std::size_t> sizes{train.cols};
  sizes.insert(sizes.end(), o.hidden.begin(), o.hidden.end());
  sizes.push_back(10);

  // example-begin strategy
  using Strategy = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored,
                                    convoy::comm::InProcess, convoy::sync::Synchronous>;
  convoy::Trainer<Strategy> trainer{
      Strategy{convoy::nn::Mlp{sizes}, {.replicas = o.replicas, .log_placement = o.log_placement}},
      make_optimizer(o)};
  // example-end strategy
  std::cout << "convoy " << convoy::version << ": training " << train.name << " (" << train.rows()
            << " examples) on " << trainer.strategy().replicas() << " replica(s), batch " << o.batch
            << "\n";

  auto const result = trainer.fit(train, {.steps = o.steps,
                                          .epochs = o.epochs,
                                          .batch_size = o.batch,
                                          .log_every = o.log_every,
                                          .seed = o.seed,
                                          .checkpoint_dir = o.checkpoint_dir,
                                          .checkpoint_every = o.checkpoint_every});
  auto const metrics = trainer.evaluate(test);
  if (!o.save_weights.empty()) {
    convoy::io::save_weights(o.save_weights, trainer.model().variables());
    std::cout << "weights saved to " << o.save_weights << "\n";
  }
  std::cout << "test loss: " << metrics.mean_loss() << "\n"
            << "samples/sec: " << result.samples_per_second << "\n"
            << "test accuracy: " << metrics.accuracy() << "\n";
  return 0;
} catch (convoy::Error const& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
