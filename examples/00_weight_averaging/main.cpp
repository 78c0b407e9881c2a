// 00_weight_averaging: replicas each take a step on their own data, then their weights are averaged
// by variable name (the Ray text's first pattern).
//
// What it shows: weights travel as a {name -> tensor} map. Each replica is a LinearModel on its
// own thread with its own 100 points of y = 0.1 x + 0.3; every iteration the driver sends the
// current weights to every replica (set_weights), each takes one SGD step, and the driver averages
// the returned maps key by key. It also shows why names matter: two models in one process under
// different scopes can only exchange weights once their names agree.
//
// Run:    build/examples/weight_averaging [--iterations N] [--replicas N]
// Expect: "Iteration N: weights are {linear/b: 0.3..., linear/w: 0.1...}" converging to 0.3 and
// 0.1.
#include <convoy/convoy.hpp>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../common/linear_model.hpp"

namespace {

using Weights = std::map<std::string, convoy::Tensor>;

std::ostream& operator<<(std::ostream& out, Weights const& weights) {
  out << "{";
  char const* separator = "";
  for (auto const& [name, tensor] : weights) {
    out << separator << name << ": " << std::setprecision(5) << tensor.data[0];
    separator = ", ";
  }
  return out << "}";
}

int run(int argc, char** argv) {
  int iterations = 201, replicas = 2;
  examples::parse_options(argc, argv, iterations, replicas);

  std::vector<examples::LinearModel> models(static_cast<std::size_t>(replicas));
  std::vector<convoy::io::Dataset> data;
  for (int r = 0; r < replicas; ++r)
    data.push_back(examples::fake_xy_data(100, static_cast<std::uint64_t>(r)));
  convoy::optim::Optimizer const sgd = convoy::optim::Sgd{.learning_rate = 0.5f};

  // example-begin weight-averaging
  Weights weights = models[0].variables().get_weights();
  for (int iteration = 0; iteration < iterations; ++iteration) {
    std::vector<Weights> returned(models.size());
    {
      std::vector<std::jthread> steps;
      for (std::size_t r = 0; r < models.size(); ++r) {
        steps.emplace_back([&, r] {
          auto& vars = models[r].variables();
          vars.set_weights(weights);  // by name: throws LoadError naming any mismatch
          models[r].forward_backward(data[r].slice(0, data[r].rows()));
          auto state = sgd.make_state(vars.element_count());
          sgd.apply(convoy::exec::Host{}, vars.weights(), vars.grads(), state, 0, 1.0f, 1);
          returned[r] = vars.get_weights();
        });
      }
    }
    for (auto& [name, tensor] : weights) {  // average key by key
      for (std::size_t i = 0; i < tensor.data.size(); ++i) {
        float sum = 0.0f;
        for (auto const& w : returned) sum += w.at(name).data[i];
        tensor.data[i] = sum / static_cast<float>(returned.size());
      }
    }
    if (iteration % 20 == 0)
      std::cout << "Iteration " << iteration << ": weights are " << weights << "\n";
  }
  // example-end weight-averaging

  // Two models in one process: a second scope gives distinct names, so a silent mix-up is
  // impossible; loading one into the other is refused with every mismatching name.
  examples::LinearModel other("other");
  try {
    other.variables().set_weights(weights);
  } catch (convoy::LoadError const& e) {
    std::cout << "as expected, names from another scope are refused:\n  " << e.what() << "\n";
  }
  bool const converged = std::abs(weights.at("linear/w").data[0] - 0.1f) < 0.01f &&
                         std::abs(weights.at("linear/b").data[0] - 0.3f) < 0.01f;
  std::cout << (converged ? "converged to w = 0.1, b = 0.3\n" : "did not converge\n");
  return converged ? 0 : 1;
}

}  // namespace

// A bad option is one line and status 2; any convoy::Error one line and status 1.
int main(int argc, char** argv) {
  return examples::run_main("weight_averaging", [&] { return run(argc, argv); });
}
