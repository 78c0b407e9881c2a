// Links convoy::gloo (installed package or FetchContent) and trains 3 steps with comm::Gloo in one
// process (2 replica threads: no other process to meet). Run by ../run_consumer.cmake.
#include <convoy/comm/gloo.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstdio>
#include <vector>

int main() {
  using Strategy = convoy::Strategy<convoy::nn::Mlp, convoy::place::Mirrored, convoy::comm::Gloo,
                                    convoy::sync::Synchronous>;
  Strategy strategy{convoy::nn::Mlp({4, 3, 2}),
                    {.replicas = 2},
                    convoy::comm::Gloo{.cluster = convoy::Cluster::local()}};
  std::vector<float> const features{1, 2, 3, 4, 4, 3, 2, 1};
  std::vector<std::int32_t> const labels{0, 1};
  convoy::RunPlan plan;
  plan.until = 3;
  plan.batch = [&](std::size_t r, std::int64_t) {
    return convoy::Batch{.features = std::span(features).subspan(4 * r, 4),
                         .labels = std::span(labels).subspan(r, 1),
                         .targets = {},
                         .rows = 1};
  };
  strategy.run(plan);
  std::printf("convoy consumer: comm::Gloo trained %lld steps on %zu replica(s)\n",
              static_cast<long long>(strategy.global_step()), strategy.replicas());
  return 0;
}
