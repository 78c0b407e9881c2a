// 01_gradient_averaging: a driver averages the replicas' gradients and applies them (the Ray text's
// second pattern).
//
// What it shows: every replica computes gradients for the same weights on its own data and
// returns them by variable name; the driver averages them key by key and applies the mean with
// its own optimizer, then ships the new weights out. This is what sync::Synchronous does for you
// inside a Strategy, written out by hand with the by-name API.
//
// Run:    build/examples/gradient_averaging [--iterations N] [--replicas N]
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

int run(int argc, char** argv) {
  int iterations = 201, replicas = 2;
  examples::parse_options(argc, argv, iterations, replicas);

  examples::LinearModel driver;  // holds the weights the driver updates
  std::vector<examples::LinearModel> models(static_cast<std::size_t>(replicas));
  std::vector<convoy::io::Dataset> data;
  for (int r = 0; r < replicas; ++r)
    data.push_back(examples::fake_xy_data(100, static_cast<std::uint64_t>(r)));
  convoy::optim::Optimizer const sgd = convoy::optim::Sgd{.learning_rate = 0.5f};
  auto& vars = driver.variables();
  auto state = sgd.make_state(vars.element_count());

  // example-begin gradient-averaging
  for (int iteration = 0; iteration < iterations; ++iteration) {
    auto const weights = vars.get_weights();
    std::vector<std::map<std::string, std::vector<float>>> gradients(models.size());
    {
      std::vector<std::jthread> workers;
      for (std::size_t r = 0; r < models.size(); ++r) {
        workers.emplace_back([&, r] {
          auto& mine = models[r].variables();
          mine.set_weights(weights);
          models[r].forward_backward(data[r].slice(0, data[r].rows()));
          for (auto const& v : mine.list()) {
            auto g = mine.grad(*mine.find(v.name));
            gradients[r][v.name].assign(g.begin(), g.end());
          }
        });
      }
    }
    for (auto const& v : vars.list()) {  // mean gradient, by name, into the driver's gradient arena
      auto mean = vars.grad(vars.at(v.name));
      for (std::size_t i = 0; i < mean.size(); ++i) {
        float sum = 0.0f;
        for (auto const& g : gradients) sum += g.at(v.name)[i];
        mean[i] = sum / static_cast<float>(gradients.size());
      }
    }
    sgd.apply(convoy::exec::Host{}, vars.weights(), vars.grads(), state, 0, 1.0f, ++state.updates);
    if (iteration % 20 == 0) {
      std::cout << "Iteration " << iteration << ": weights are {";
      char const* separator = "";
      for (auto const& [name, tensor] : vars.get_weights()) {
        std::cout << separator << name << ": " << std::setprecision(5) << tensor.data[0];
        separator = ", ";
      }
      std::cout << "}\n";
    }
  }
  // example-end gradient-averaging

  auto const final_weights = vars.get_weights();
  bool const converged = std::abs(final_weights.at("linear/w").data[0] - 0.1f) < 0.01f &&
                         std::abs(final_weights.at("linear/b").data[0] - 0.3f) < 0.01f;
  std::cout << (converged ? "converged to w = 0.1, b = 0.3\n" : "did not converge\n");
  return converged ? 0 : 1;
}

}  // namespace

// A bad option is one line and status 2; any convoy::Error one line and status 1.
int main(int argc, char** argv) {
  return examples::run_main("gradient_averaging", [&] { return run(argc, argv); });
}
