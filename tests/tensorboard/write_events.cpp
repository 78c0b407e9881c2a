// Trains a small MLP on two replicas in lock step for 40 steps with the tensorboard callback, into
// the directory given as the only argument, and writes there expected.json: what the event file
// must hold, from the C++ side (the history's interval means, the evaluations, every variable's
// element count, and the sums of each variable and gradient at every histogram step, read by a
// hook of its own). test_tensorboard_events.py reads both back with TensorBoard's reader.
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/callbacks/tensorboard.hpp>
#include <convoy/train/trainer.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <synthetic.hpp>

using namespace convoy;

namespace {

std::string number(double value) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// {"name": [element count, sum], ...}
std::string sums(std::map<std::string, Tensor> const& named) {
  std::string out = "{";
  for (auto const& [name, tensor] : named) {
    double const sum = std::accumulate(tensor.data.begin(), tensor.data.end(), 0.0);
    out += (out.size() > 1 ? ", \"" : "\"") + name + "\": [" + std::to_string(tensor.data.size()) +
           ", " + number(sum) + "]";
  }
  return out + "}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_events LOG_DIR\n";
    return 2;
  }
  std::filesystem::path const dir = argv[1];
  io::Dataset const train = testing::synthetic_classes(960, 12, 3);
  io::Dataset const validation = testing::synthetic_classes(300, 12, 3, 7);
  using Mirrored = Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous>;
  Trainer<Mirrored> trainer{Mirrored{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 2}},
                            optim::Sgd{0.1f}};

  // The histograms' expected contents, read at the same steps through the same RunControl.
  std::vector<std::string> histogram_steps;
  Hooks reference;
  reference.on_step = [&](StepReport const& report, RunControl& control) {
    if (report.global_step % 10 == 0) {
      histogram_steps.push_back("{\"step\": " + std::to_string(report.global_step) +
                                ", \"weights\": " + sums(control.weights()) +
                                ", \"gradients\": " + sums(control.gradients()) + "}");
    }
    return true;
  };

  // example-begin tensorboard
  auto const result = trainer.fit(
      train, {.steps = 40,
              .batch_size = 96,
              .log_every = 5,
              .validation = &validation,
              .evaluate_every = 20,
              .hooks = {callbacks::tensorboard(dir, {.histograms_every = 10}), reference}});
  // example-end tensorboard

  std::ostringstream json;
  json << "{\"intervals\": [";
  bool first = true;
  for (auto const& r : result.history) {
    if (r.kind != RecordKind::interval) continue;
    json << (first ? "" : ", ") << "{\"step\": " << r.global_step << ", \"loss\": "
         << number(*r.loss) << ", \"lr\": " << number(r.lr) << ", \"samples_per_s\": "
         << number(r.samples_per_s.value_or(-1.0)) << "}";
    first = false;
  }
  json << "], \"evaluations\": [";
  first = true;
  for (auto const& r : result.history) {
    if (r.kind != RecordKind::evaluation) continue;
    json << (first ? "" : ", ") << "{\"step\": " << r.global_step
         << ", \"loss\": " << number(*r.val_loss())
         << ", \"accuracy\": " << number(*r.val_accuracy()) << "}";
    first = false;
  }
  json << "], \"histograms\": [";
  for (std::size_t i = 0; i < histogram_steps.size(); ++i) {
    json << (i ? ", " : "") << histogram_steps[i];
  }
  json << "]}\n";
  std::ofstream(dir / "expected.json") << json.str();
  return 0;
}
