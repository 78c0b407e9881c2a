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
#include <algorithm>
#include <cmath>
#include <convoy/convoy.hpp>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <random>
#include <vector>

// (1) The model. Its weights live in its own Variables, under names that never change: they are
// how weights travel between replicas, files and checkpoints.
// example-begin model
class SoftmaxRegression {
 public:
  SoftmaxRegression(std::size_t features, std::size_t classes) : vars_("softmax") {
    w_ = vars_.add("w", {features, classes});  // "softmax/w", zero-initialised
    b_ = vars_.add("b", {classes});            // "softmax/b"
  }
  convoy::Variables& variables() { return vars_; }

  // Returns the batch's mean loss and OVERWRITES every gradient: convoy never clears them, so a
  // bare += would add up the gradients of every step since the start.
  float forward_backward(convoy::Batch const& batch) {
    auto dw = vars_.grad(w_), db = vars_.grad(b_);
    std::ranges::fill(dw, 0.0f);
    std::ranges::fill(db, 0.0f);
    float const n = static_cast<float>(batch.rows);
    float loss = 0.0f;
    for (std::size_t r = 0; r < batch.rows; ++r) {
      auto p = probabilities(batch, r);
      auto const label = static_cast<std::size_t>(batch.labels[r]);
      loss -= std::log(p[label]);
      p[label] -= 1.0f;  // d loss / d logits
      for (std::size_t c = 0; c < p.size(); ++c) {
        db[c] += p[c] / n;
        for (std::size_t j = 0; j < batch.cols(); ++j)
          dw[j * p.size() + c] += batch.features[r * batch.cols() + j] * p[c] / n;
      }
    }
    return loss / n;
  }

  // Optional, forward only: sums that Trainer::evaluate adds up over batches.
  convoy::Metrics evaluate(convoy::Batch const& batch) {
    convoy::Metrics m;
    for (std::size_t r = 0; r < batch.rows; ++r) {
      auto const p = probabilities(batch, r);
      auto const label = static_cast<std::size_t>(batch.labels[r]);
      m.loss_sum -= std::log(p[label]);
      m.correct += static_cast<std::size_t>(std::ranges::max_element(p) - p.begin()) == label;
      ++m.count;
    }
    return m;
  }

 private:
  std::vector<float> probabilities(convoy::Batch const& batch, std::size_t row) const {
    auto const w = vars_.value(w_), b = vars_.value(b_);
    std::vector<float> p(b.begin(), b.end());
    for (std::size_t c = 0; c < p.size(); ++c)
      for (std::size_t j = 0; j < batch.cols(); ++j)
        p[c] += batch.features[row * batch.cols() + j] * w[j * p.size() + c];
    float const top = std::ranges::max(p);
    float sum = 0.0f;
    for (float& v : p) sum += v = std::exp(v - top);
    for (float& v : p) v /= sum;
    return p;
  }

  convoy::Variables vars_;
  convoy::VariableId w_, b_;
};
// example-end model

// (2) The data: three Gaussian blobs 120 degrees apart, from our own vectors.
// example-begin data
convoy::io::Dataset blobs(char const* name, int rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.7f);
  convoy::io::DatasetBuilder builder{name, {.features = 2, .classes = 3}};
  for (int i = 0; i < rows; ++i) {
    float const angle = 2.0944f * static_cast<float>(i % 3);
    std::vector<float> const point{2 * std::cos(angle) + noise(rng),
                                   2 * std::sin(angle) + noise(rng)};
    builder.add(point, i % 3);  // throws, naming the row, for a wrong length or label
  }
  return std::move(builder).build();
}
// example-end data

// (3) The strategy, one line; each alternative is a change of this line only:
//   place::CentralStorage, comm::InProcess, sync::Asynchronous         (one shared copy)
//   place::Mirrored,       comm::InProcess, sync::BoundedStaleness<2>  (up to 2 steps apart)
//   place::Host,           comm::InProcess, sync::Synchronous          (one replica)
// example-begin strategy
using Strat = convoy::Strategy<SoftmaxRegression, convoy::place::Mirrored, convoy::comm::InProcess,
                               convoy::sync::Synchronous>;
// example-end strategy
using Trainer = convoy::Trainer<Strat>;
Trainer make_trainer() {
  return Trainer{Strat{SoftmaxRegression{2, 3}}, convoy::optim::Sgd{.learning_rate = 0.5f}};
}

int main(int argc, char** argv) {
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
}
