// 04_own_model: a model of your own, written by hand, trained by convoy.
//
// What it shows, top to bottom: (1) a model is any copyable type with `variables()` and
// `forward_backward()` (here softmax regression, plus the optional `evaluate()`); (2) a dataset
// built from the program's own vectors, every row checked by io::DatasetBuilder; (3) training
// through Trainer, the distribution picked by one type line; (4) a run that stops and a new one
// that resumes from its checkpoint; (5) weights saved and loaded by variable name. The page
// docs/own_model.md walks through it and states the contract a model keeps.
//
// Run:    build/examples/own_model [DIR]   (DIR: where weights and checkpoints go, emptied
//         first; default: convoy_own_model in the system's temporary directory)
// Expect: progress lines, then "resumed at step 150, test accuracy 0.9..: trained and reloaded
//         by name agree" (three blobs in the plane: chance is 0.33). In about a second.
#include <convoy/convoy.hpp>
#include <cstdint>
#include <filesystem>
#include <iostream>

// (1) the model and (2) the data: softmax regression and three blobs in the plane.
#include "softmax_regression.hpp"

// (3) The strategy, one line; each alternative is a change of this line only:
//   place::CentralStorage, comm::InProcess, sync::Asynchronous         (one shared copy)
//   place::Mirrored,       comm::InProcess, sync::BoundedStaleness<2>  (up to 2 steps apart)
//   place::Host,           comm::InProcess, sync::Synchronous          (one replica)
//   place::Sharded<>,      comm::ZmqPs,     sync::Synchronous          (a cluster: include
//     <convoy/comm/zmq_ps.hpp>, link convoy::zmq_ps, start under tools/convoy-launch)
// example-begin strategy
using Strat = convoy::Strategy<SoftmaxRegression, convoy::place::Mirrored, convoy::comm::InProcess,
                               convoy::sync::Synchronous>;
// example-end strategy
using Trainer = convoy::Trainer<Strat>;
Trainer make_trainer() {
  return Trainer{Strat{SoftmaxRegression{2, 3}}, convoy::optim::Sgd{.learning_rate = 0.5f}};
}

// Every convoy error is a convoy::Error with one line that says what is wrong: print it.
int main(int argc, char** argv) try {
  namespace fs = std::filesystem;
  fs::path const dir =
      argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "convoy_own_model";
  fs::remove_all(dir);
  auto const train = blobs("blobs/train", 2400, 1), test = blobs("blobs/test", 600, 2);

  // example-begin train
  // The global batch is split over the replicas (one per core by default): keep it a multiple.
  auto first = make_trainer();
  convoy::FitOptions options{.steps = 150,
                             .batch_size = 20 * first.strategy().replicas(),
                             .log_every = 50,
                             .checkpoint_dir = dir / "checkpoints"};
  first.fit(train, options);  // writes a checkpoint at step 150 and stops

  // (4) A new run, as after a crash: the same checkpoint_dir resumes where the first one stopped.
  auto trainer = make_trainer();
  std::int64_t resumed_at = -1;
  options.steps = 300;
  options.callbacks = {[&](convoy::StepReport const& s) {
    if (resumed_at < 0) resumed_at = s.global_step - 1;
    return true;
  }};
  trainer.fit(train, options);
  // example-end train

  // example-begin weights
  // (5) Weights by name: saved, then loaded into a fresh model of the same names.
  trainer.save_weights(dir / "weights.json");
  auto reloaded = make_trainer();
  reloaded.load_weights(dir / "weights.json");
  // example-end weights
  double const accuracy = trainer.evaluate(test).accuracy();
  bool const agree = reloaded.evaluate(test).accuracy() == accuracy;
  std::cout << "resumed at step " << resumed_at << ", test accuracy " << accuracy
            << ": trained and reloaded by name " << (agree ? "agree" : "DISAGREE") << "\n";
  return agree && resumed_at == 150 ? 0 : 1;
} catch (convoy::Error const& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
