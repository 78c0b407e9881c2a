// Links convoy::torch (installed package or FetchContent) and trains a LibTorch module for 3 steps
// under the Host strategy. Run by ../run_consumer.cmake, which checks what it prints.
#include <convoy/torch/model.hpp>
// (LibTorch first: its logging defines CHECK macros.)
#include <convoy/strategy.hpp>
#include <cstdio>
#include <vector>

int main() {
  using Model = convoy::libtorch::Model<torch::nn::Sequential>;
  Model model([] { return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(),
                                                torch::nn::Linear(3, 2)); });
  using Strategy = convoy::Strategy<Model, convoy::place::Host, convoy::comm::InProcess,
                                    convoy::sync::Synchronous>;
  Strategy strategy{std::move(model)};
  std::vector<float> const features{1, 2, 3, 4, 4, 3, 2, 1};
  std::vector<std::int32_t> const labels{0, 1};
  convoy::RunPlan plan;
  plan.until = 3;
  plan.batch = [&](std::size_t, std::int64_t) {
    return convoy::Batch{.features = features, .labels = labels, .targets = {}, .rows = 2};
  };
  strategy.run(plan);
  // The version of the headers it compiled against, which the driver compares with the build's.
  std::printf("convoy consumer: a LibTorch model of %zu variables trained %lld steps (LibTorch %d.%d)\n",
              strategy.layout().size(), static_cast<long long>(strategy.global_step()),
              TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
  return 0;
}
