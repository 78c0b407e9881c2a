// A model may leave its gradients outside the gradient arena (GradientPlaces): the lock-step sum
// reads them where they are, get_gradients sees them from a callback, and the arena holds the last
// ones once the run ends. The model here leaves copies and fills the arena with NaN, so an engine
// that read the arena would train on NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstring>
#include <feed.hpp>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <synthetic.hpp>
#include <vector>

namespace test_sync_gradient_places {

using namespace convoy;
using testing::Feed;
using testing::plan;

namespace {

io::Dataset const data = testing::synthetic_classes(960, 12, 3);

// nn::Mlp, except that where the engine asks for GradientPlaces it leaves the gradients of every
// other variable in a buffer of its own, new at each pass (the last one freed, so that
// AddressSanitizer sees a read of it), and fills their part of the arena with NaN.
class LeavingMlp {
 public:
  explicit LeavingMlp(nn::Mlp mlp) : mlp_(std::move(mlp)) {}
  LeavingMlp(LeavingMlp const& other) : mlp_(other.mlp_) {}

  Variables& variables() { return mlp_.variables(); }
  float forward_backward(Batch const& batch) { return mlp_.forward_backward(batch); }
  template <class Context>
  float forward_backward(Batch const& batch, Context const&, GradientPlaces& places) {
    outside_.reset();
    float const loss = mlp_.forward_backward(batch);
    auto const grads = variables().grads();
    outside_ = std::make_unique<float[]>(grads.size());
    std::ranges::copy(grads, outside_.get());
    auto const list = variables().list();
    for (std::size_t v = 1; v < list.size(); v += 2) {
      places.leave(VariableId{v}, outside_.get() + list[v].offset);
      std::ranges::fill(variables().grad(VariableId{v}), std::numeric_limits<float>::quiet_NaN());
    }
    ++left_;
    return loss;
  }
  int passes_left() const { return left_; }

 private:
  nn::Mlp mlp_;
  std::unique_ptr<float[]> outside_;
  int left_ = 0;
};
static_assert(leaves_gradients<LeavingMlp, exec::Host>);
static_assert(!leaves_gradients<nn::Mlp, exec::Host>);

struct Trace {
  std::vector<float> losses;
  std::vector<std::map<std::string, Tensor>> gradients;  // get_gradients() after each step
  std::vector<float> weights;
  std::vector<float> arena;  // replica 0's gradient arena after the run
};

template <class M, class P>
Trace train(P placement, optim::Optimizer opt, int* passes_left = nullptr) {
  Strategy<M, P, comm::InProcess, sync::Synchronous> strategy(M(nn::Mlp({12, 16, 3})), placement);
  strategy.set_optimizer(opt);
  Feed const feed(data, 96, strategy.replicas(), 7);
  Trace trace;
  auto const record = [&](StepReport const& report) {
    trace.losses.push_back(report.loss);
    trace.gradients.push_back(strategy.get_gradients());
    return true;
  };
  // Two runs: the second starts from what the first settled.
  strategy.run(plan(5, feed, record));
  trace.gradients.push_back(strategy.get_gradients());
  strategy.run(plan(12, feed, record));
  trace.weights = strategy.weights();
  auto& group = strategy.engine().state();
  auto const grads = group.replica(0).variables().grads();
  trace.arena.assign(grads.begin(), grads.end());
  if constexpr (std::is_same_v<M, LeavingMlp>) {
    for (std::size_t r = 0; r < group.size(); ++r) *passes_left += group.replica(r).passes_left();
  }
  return trace;
}

bool same_floats(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gradients left outside the arena train bit for bit as gradients written into it") {
  for (optim::Optimizer opt :
       {optim::Optimizer{optim::Sgd{0.2f}}, optim::Optimizer{optim::Adam{0.01f}}}) {
    CAPTURE(opt.name());
    auto check = [&](auto placement, std::size_t replicas) {
      CAPTURE(replicas);
      using P = decltype(placement);
      int passes_left = 0;
      Trace const left = train<LeavingMlp, P>(placement, opt, &passes_left);
      Trace const written = train<nn::Mlp, P>(placement, opt);
      CHECK(passes_left == static_cast<int>(12 * replicas));  // the engine asked every pass
      CHECK(same_floats(left.losses, written.losses));
      CHECK(same_floats(left.weights, written.weights));
      CHECK(std::ranges::none_of(left.weights, [](float w) { return std::isnan(w); }));
      // From a callback, get_gradients reads them where they were left; between the runs, from
      // the arena.
      REQUIRE(left.gradients.size() == written.gradients.size());
      for (std::size_t s = 0; s < left.gradients.size(); ++s) {
        CAPTURE(s);
        for (auto const& [name, tensor] : written.gradients[s])
          CHECK(same_floats(left.gradients[s].at(name).data, tensor.data));
      }
      // After the run the arena holds them again, as the Model contract says.
      CHECK(same_floats(left.arena, written.arena));
    };
    check(place::Host{}, 1);
    check(place::Mirrored{.replicas = 2}, 2);
    check(place::Mirrored{.replicas = 3}, 3);
    check(place::CentralStorage{.replicas = 2}, 2);
  }
}

TEST_CASE("GradientPlaces: reset points at the arena, settle copies what was left outside") {
  nn::Mlp mlp({4, 3, 2});
  auto& vars = mlp.variables();
  GradientPlaces places(vars);
  CHECK_FALSE(places.left());
  for (std::size_t v = 0; v < vars.size(); ++v)
    CHECK(places.of(v) == vars.grads().data() + vars.list()[v].offset);
  std::vector<float> outside(vars.list()[1].size, 2.5f);
  places.leave(VariableId{1}, outside.data());
  CHECK(places.left());
  CHECK(places.of(1) == outside.data());
  places.settle();
  CHECK_FALSE(places.left());
  CHECK(places.of(1) == vars.grads().data() + vars.list()[1].offset);
  auto const second = vars.grad(VariableId{1});
  CHECK(std::ranges::all_of(second, [](float g) { return g == 2.5f; }));
  CHECK(std::ranges::all_of(vars.grad(VariableId{0}), [](float g) { return g == 0.0f; }));
}

}  // namespace test_sync_gradient_places
