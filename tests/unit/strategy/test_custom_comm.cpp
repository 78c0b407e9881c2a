// The Comm seam: a communication policy written here, outside the library's headers, runs every
// replica one after another on the calling thread, and trains through the unmodified Strategy and
// Trainer. It must match comm::InProcess with Mirrored replicas step for step.
#include <doctest/doctest.h>

#include <convoy/comm/replica_group.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <ostream>
#include <string_view>
#include <synthetic.hpp>
#include <vector>

namespace test_strategy_custom_comm {

namespace {

using namespace convoy;

// The engine: a ReplicaGroup for the state, and a run loop. Each step computes every replica's
// gradients in turn, averages them into replica 0's arena, applies the optimizer to replica 0 and
// copies its weights to the others.
template <class Model, class Placement, class Sync>
class SequentialEngine {
 public:
  template <class Comm>
  SequentialEngine(Model prototype, Placement placement, Comm, Sync)
      : group_(std::move(prototype), placement, false) {}

  comm::ReplicaGroup<Model, Placement>& state() { return group_; }
  comm::ReplicaGroup<Model, Placement> const& state() const { return group_; }
  bool lock_step() const { return true; }
  void log_placement(std::ostream& out, std::string_view) const {
    out << "sequential: " << group_.size() << " replicas on the calling thread\n";
  }

  void run(RunPlan const& plan) {
    group_.check_optimizer_state();
    auto& c = group_.counters();
    std::size_t const n = group_.size();
    auto const ctx = group_.context(0);
    while (!plan.reached(c.global_step, c.batches())) {
      float loss = 0.0f;
      for (std::size_t r = 0; r < n; ++r) {
        loss += forward_backward_in(group_.replica(r), plan.batch(r, c.local_steps[r]), ctx);
      }
      auto sum = group_.variables(0).grads();
      for (std::size_t r = 1; r < n; ++r) {
        auto const g = group_.variables(r).grads();
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
      }
      auto weights = group_.variables(0).weights();
      group_.optimizer().apply(ctx, weights, sum, group_.slots(), 0,
                               1.0f / static_cast<float>(n), ++group_.slots().updates);
      for (std::size_t r = 1; r < n; ++r) group_.variables(r).set_flat(weights);
      ++c.global_step;
      c.applied += static_cast<std::int64_t>(n);
      for (auto& local : c.local_steps) ++local;
      StepReport const report{.global_step = c.global_step,
                              .local_step = c.local_steps[0],
                              .loss = loss / static_cast<float>(n),
                              .applied = c.applied,
                              .batches = c.batches()};
      if (plan.after_step && !plan.after_step(report)) return;
    }
  }

 private:
  comm::ReplicaGroup<Model, Placement> group_;
};

struct Sequential {
  using policy_category = communication_tag;
  static constexpr std::string_view name = "Sequential";
  template <class Model, class Placement, class Sync>
  using engine = SequentialEngine<Model, Placement, Sync>;
};

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

template <class Comm>
std::vector<float> losses_of(std::vector<float>& weights) {
  using S = Strategy<nn::Mlp, place::Mirrored, Comm, sync::Synchronous>;
  Trainer<S> trainer{S{nn::Mlp({12, 16, 3}), place::Mirrored{.replicas = 3}},
                     optim::Momentum{0.05f, 0.9f}};
  std::vector<float> losses;
  Callback record = [&](StepReport const& r) {
    losses.push_back(r.loss);
    return true;
  };
  auto const result = trainer.fit(
      data, {.steps = 40, .batch_size = 96, .log = nullptr, .callbacks = {record}});
  CHECK(result.global_step == 40);
  CHECK(result.applied == 120);
  weights = trainer.strategy().weights();
  return losses;
}

}  // namespace

TEST_CASE("a Comm defined outside the library trains through Strategy and Trainer like Mirrored") {
  std::vector<float> sequential_weights, mirrored_weights;
  auto const sequential = losses_of<Sequential>(sequential_weights);
  auto const mirrored = losses_of<comm::InProcess>(mirrored_weights);
  REQUIRE(sequential.size() == 40);
  REQUIRE(mirrored.size() == 40);
  for (std::size_t k = 0; k < 40; ++k) {
    CAPTURE(k);
    CHECK(sequential[k] == doctest::Approx(mirrored[k]).epsilon(1e-5));
  }
  CHECK(sequential.back() < 0.5f * sequential.front());  // it trained, so matching means something
  REQUIRE(sequential_weights.size() == mirrored_weights.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < sequential_weights.size(); ++i) {
    worst = std::max(worst, double(std::abs(sequential_weights[i] - mirrored_weights[i])));
  }
  CHECK(worst < 1e-5);
}

}  // namespace test_strategy_custom_comm
