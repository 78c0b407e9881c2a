// The program docs/own_model.md teaches (train, save the weights by name, load them into a fresh
// trainer, evaluate both) with the parameter server's type line, run unchanged as every task of a
// cluster: the ctest own_model_on_ps starts it under tools/convoy-launch with 1 ps and 2 workers.
// On the ps task fit() serves its shard and ends the process (comm::ZmqPs::exit_after_serving),
// so nothing after it runs there; the workers evaluate and save. The resume of the example
// (a second Trainer in the same process) is left out: a cluster resumes when its tasks restart.
//
// Run:    tools/convoy-launch --ps 1 --workers 2 -- build/tests/cluster/own_model_on_ps DIR
// Expect: each worker prints "test accuracy 0.9..: trained and reloaded by name agree"; every
//         task exits 0, the ps once both workers said goodbye.
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <filesystem>
#include <iostream>

#include "../../examples/04_own_model/softmax_regression.hpp"

using Strat = convoy::Strategy<SoftmaxRegression, convoy::place::Sharded<>, convoy::comm::ZmqPs,
                               convoy::sync::Synchronous>;
using Trainer = convoy::Trainer<Strat>;

Trainer make_trainer() {
  return Trainer{Strat{SoftmaxRegression{2, 3}}, convoy::optim::Sgd{.learning_rate = 0.5f}};
}

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::cerr << "usage: own_model_on_ps DIR (shared by the tasks; the chief's checkpoints)\n";
    return 2;
  }
  std::filesystem::path const dir = argv[1];
  auto const train = blobs("blobs/train", 2400, 1), test = blobs("blobs/test", 600, 2);
  auto trainer = make_trainer();
  convoy::FitOptions const options{.steps = 150,
                                   .batch_size = 20 * trainer.strategy().replicas(),
                                   .log_every = 50,
                                   .checkpoint_dir = dir / "checkpoints"};
  trainer.fit(train, options);
  trainer.save_weights(dir / "weights.json");
  auto reloaded = make_trainer();
  reloaded.load_weights(dir / "weights.json");
  double const accuracy = trainer.evaluate(test).accuracy();
  bool const agree = reloaded.evaluate(test).accuracy() == accuracy;
  std::cout << "test accuracy " << accuracy << ": trained and reloaded by name "
            << (agree ? "agree" : "DISAGREE") << std::endl;
  return agree ? 0 : 1;
} catch (convoy::Error const& e) {
  std::cerr << e.what() << "\n";
  return 1;
}
