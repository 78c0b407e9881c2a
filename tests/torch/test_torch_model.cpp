// libtorch::Model: a LibTorch module trained by convoy's strategies matches plain LibTorch step for
// step, replicas match one replica at the whole batch, BatchNorm's statistics follow the buffer
// rule, weights travel by LibTorch's names both ways, checkpoints resume exactly, and a module of
// another architecture is refused by name.
// clang-format off
#include <torch_first.hpp>  // before doctest: LibTorch's glog defines CHECK
// clang-format on
#include <doctest/doctest.h>
#include <omp.h>

#include <convoy/io/weights.hpp>
#include <convoy/strategy.hpp>
#include <convoy/train/trainer.hpp>
#include <cstddef>
#include <helpers.hpp>
#include <map>
#include <sstream>
#include <string>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <thread>
#include <vector>

using namespace convoy;
namespace nn = ::torch::nn;

namespace {

constexpr std::int64_t side = 4;  // 1 x 4 x 4 images: 16 features
io::Dataset const data = testing::synthetic_classes(256, side* side, 3);

// A small convolutional net, with or without BatchNorm.
nn::Sequential conv_net(bool batch_norm) {
  nn::Sequential net;
  net->push_back("conv", nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)));
  if (batch_norm) net->push_back("bn", nn::BatchNorm2d(4));
  net->push_back(nn::ReLU());
  net->push_back(nn::Flatten());
  net->push_back("fc", nn::Linear(4 * side * side, 3));
  return net;
}

using Net = libtorch::Model<nn::Sequential>;
Net make_model(bool batch_norm) {
  ::torch::manual_seed(7);
  return Net([batch_norm] { return conv_net(batch_norm); }, {.row_shape = {1, side, side}});
}

// Rows [begin, begin + rows) of the data as a Batch.
Batch rows_of(std::size_t begin, std::size_t rows) { return data.slice(begin, rows); }

// Every named parameter and buffer of a plain module, as convoy tensors.
std::map<std::string, Tensor> state_of(nn::Module const& module) {
  std::map<std::string, Tensor> out;
  auto add = [&](std::string const& name, ::torch::Tensor const& t) {
    auto const f = t.to(::torch::kFloat).contiguous();
    Shape shape;
    for (auto d : t.sizes()) shape.push_back(static_cast<std::size_t>(d));
    out.emplace(name, Tensor{shape, std::vector<float>(f.data_ptr<float>(),
                                                       f.data_ptr<float>() + f.numel())});
  };
  for (auto const& p : module.named_parameters()) add(p.key(), p.value());
  for (auto const& b : module.named_buffers()) add(b.key(), b.value());
  return out;
}

// Copies tensors by name into a plain module's parameters and buffers.
void load_into(nn::Module& module, std::map<std::string, Tensor> const& named) {
  ::torch::NoGradGuard no_grad;
  auto copy = [&](std::string const& name, ::torch::Tensor& t) {
    auto const& src = named.at(name);
    t.copy_(::torch::from_blob(const_cast<float*>(src.data.data()), t.sizes(), ::torch::kFloat));
  };
  for (auto& p : module.named_parameters()) copy(p.key(), p.value());
  for (auto& b : module.named_buffers()) copy(b.key(), b.value());
}

float max_difference(std::map<std::string, Tensor> const& a,
                     std::map<std::string, Tensor> const& b) {
  REQUIRE(a.size() == b.size());
  float worst = 0.0f;
  for (auto const& [name, t] : a) {
    auto const& u = b.at(name);
    REQUIRE(t.shape == u.shape);
    for (std::size_t i = 0; i < t.data.size(); ++i)
      worst = std::max(worst, std::abs(t.data[i] - u.data[i]));
  }
  return worst;
}

// A run of `steps` where replica r of `replicas` takes its share of rows [step * batch, ...).
RunPlan run_of(std::int64_t steps, std::size_t batch, std::size_t replicas,
               std::vector<float>* losses = nullptr) {
  RunPlan plan;
  plan.until = steps;
  std::size_t const share = batch / replicas;
  plan.batch = [=](std::size_t replica, std::int64_t step) {
    return rows_of(static_cast<std::size_t>(step) * batch + replica * share, share);
  };
  if (losses) {
    plan.after_step = [losses](StepReport const& r) {
      losses->push_back(r.loss);
      return true;
    };
  }
  return plan;
}

}  // namespace

TEST_CASE("variables take LibTorch's names: parameters, then buffers as state") {
  auto m = make_model(true);
  auto const& list = m.variables().list();
  std::vector<std::string> names;
  for (auto const& v : list) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                          "fc.weight", "fc.bias", "bn.running_mean",
                                          "bn.running_var", "bn.num_batches_tracked"});
  CHECK(list[0].shape == Shape{4, 1, 3, 3});
  CHECK(list[0].trainable);
  CHECK_FALSE(list[7].trainable);
  CHECK(list[8].shape == Shape{});
}

TEST_CASE("the module's parameters and gradients are views of the arenas") {
  auto m = make_model(false);
  auto& vars = m.variables();
  auto const loss = m.forward_backward(rows_of(0, 8));
  CHECK(std::isfinite(loss));
  auto params = m.net()->parameters();
  CHECK(params[0].data_ptr<float>() == vars.weights().data());
  CHECK(params[0].grad().data_ptr<float>() == vars.grads().data());
  // forward_backward overwrites the gradients: twice the same batch gives the same gradients.
  std::vector<float> const first(vars.grads().begin(), vars.grads().end());
  m.forward_backward(rows_of(0, 8));
  CHECK(std::ranges::equal(vars.grads(), first));
  // A copy has arenas of its own and the same values.
  Net copy(m);
  CHECK(copy.variables().weights().data() != vars.weights().data());
  CHECK(std::ranges::equal(copy.variables().weights(), vars.weights()));
  CHECK(copy.net()->parameters()[0].data_ptr<float>() == copy.variables().weights().data());
}

TEST_CASE("gradients are announced during the backward pass, last layer first, each once") {
  auto m = make_model(false);
  std::vector<std::size_t> order;
  auto record = [&](VariableId first, VariableId last) {
    for (auto i = first.index; i <= last.index; ++i) order.push_back(i);
  };
  m.forward_backward(rows_of(0, 8), exec::Host{}, GradientsReady(record));
  REQUIRE(order.size() == 4);
  std::vector<std::size_t> sorted = order;
  std::ranges::sort(sorted);
  CHECK(sorted == std::vector<std::size_t>{0, 1, 2, 3});
  CHECK(order[0] >= 2);  // fc's weight or bias, before the convolution's
}

TEST_CASE("each replica thread computes with one LibTorch thread") {
  auto m = make_model(false);
  int seen = 0;
  std::thread([&] {
    omp_set_num_threads(2);
    m.forward_backward(rows_of(0, 8));
    seen = omp_get_max_threads();
  }).join();
  CHECK(seen == 1);
}

TEST_CASE("one replica matches a plain LibTorch loop step for step") {
  for (bool batch_norm : {false, true}) {
    CAPTURE(batch_norm);
    constexpr float lr = 0.1f;
    constexpr std::int64_t steps = 5;
    constexpr std::size_t batch = 16;
    ::torch::manual_seed(7);
    auto plain = conv_net(batch_norm);
    ::torch::optim::SGD sgd(plain->parameters(), ::torch::optim::SGDOptions(lr));
    std::vector<float> plain_losses;
    for (std::int64_t s = 0; s < steps; ++s) {
      auto const b = rows_of(static_cast<std::size_t>(s) * batch, batch);
      auto const x = ::torch::from_blob(const_cast<float*>(b.features.data()),
                                        {static_cast<std::int64_t>(batch), 1, side, side});
      sgd.zero_grad();
      auto const loss = libtorch::cross_entropy(plain->forward(x), b);
      loss.backward();
      sgd.step();
      plain_losses.push_back(loss.item<float>());
    }
    Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> strategy{make_model(batch_norm)};
    strategy.set_optimizer(optim::Sgd{.learning_rate = lr});
    std::vector<float> losses;
    strategy.run(run_of(steps, batch, 1, &losses));
    REQUIRE(losses.size() == plain_losses.size());
    for (std::size_t s = 0; s < losses.size(); ++s)
      CHECK(losses[s] == doctest::Approx(plain_losses[s]).epsilon(1e-5));
    CHECK(max_difference(strategy.get_weights(), state_of(*plain)) < 1e-5f);
  }
}

TEST_CASE("two Mirrored replicas match one replica at twice the batch") {
  constexpr std::int64_t steps = 4;
  Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> one{make_model(false)};
  Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous> two{make_model(false),
                                                                         {.replicas = 2}};
  one.set_optimizer(optim::Momentum{.learning_rate = 0.05f});
  two.set_optimizer(optim::Momentum{.learning_rate = 0.05f});
  one.run(run_of(steps, 32, 1));
  two.run(run_of(steps, 32, 2));
  CHECK(max_difference(one.get_weights(), two.get_weights()) < 1e-5f);
}

TEST_CASE("BatchNorm's statistics: a synchronous step keeps the mean of the replicas'") {
  // Two plain copies, each in train mode on its half of the batch: the expected statistics are the
  // mean of theirs.
  ::torch::manual_seed(7);
  auto a = conv_net(true), b = conv_net(true);
  load_into(*b, state_of(*a));
  auto forward = [](nn::Sequential& net, Batch const& half) {
    net->train();
    net->forward(::torch::from_blob(const_cast<float*>(half.features.data()),
                                    {static_cast<std::int64_t>(half.rows), 1, side, side}));
  };
  forward(a, rows_of(0, 16));
  forward(b, rows_of(16, 16));
  auto const sa = state_of(*a), sb = state_of(*b);

  auto check = [&](auto& strategy) {
    strategy.set_optimizer(optim::Adam{});
    strategy.run(run_of(1, 32, 2));
    auto const w = strategy.get_weights();
    for (std::string name : {"bn.running_mean", "bn.running_var"}) {
      CAPTURE(name);
      for (std::size_t i = 0; i < 4; ++i) {
        float const mean = 0.5f * (sa.at(name).data[i] + sb.at(name).data[i]);
        CHECK(w.at(name).data[i] == doctest::Approx(mean).epsilon(1e-5));
      }
    }
    CHECK(w.at("bn.num_batches_tracked").data[0] == 1.0f);
    // Evaluation (a copy of the model, as Trainer::evaluate uses) normalizes with those statistics.
    Net evaluator(strategy.model());
    strategy.read_weights(evaluator.variables().weights());
    auto reference = conv_net(true);
    load_into(*reference, w);
    reference->eval();
    auto const test = rows_of(64, 32);
    auto const logits = reference->forward(
        ::torch::from_blob(const_cast<float*>(test.features.data()), {32, 1, side, side}));
    auto const expected = libtorch::cross_entropy(logits, test).item<float>();
    CHECK(evaluator.evaluate(test).mean_loss() == doctest::Approx(expected).epsilon(1e-5));
  };
  SUBCASE("Mirrored") {
    Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous> s{make_model(true),
                                                                         {.replicas = 2}};
    check(s);
  }
  SUBCASE("CentralStorage") {
    Strategy<Net, place::CentralStorage, comm::InProcess, sync::Synchronous> s{make_model(true),
                                                                               {.replicas = 2}};
    check(s);
  }
}

TEST_CASE("weights travel by LibTorch's names between convoy's files and a plain module") {
  testing::TempDir dir("torch-weights");
  auto m = make_model(true);
  m.forward_backward(rows_of(0, 16));
  // convoy -> plain LibTorch: a weights file read back by name into a fresh module.
  io::save_named(dir / "w.bin", m.variables().get_weights(), io::Format::binary);
  auto plain = conv_net(true);
  load_into(*plain, io::load_named(dir / "w.bin", io::Format::binary));
  CHECK(max_difference(state_of(*plain), m.variables().get_weights()) == 0.0f);
  // plain LibTorch -> convoy: a module trained elsewhere, set by name.
  ::torch::manual_seed(99);
  auto other = conv_net(true);
  Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous> s{make_model(true),
                                                                       {.replicas = 2}};
  s.set_weights(state_of(*other));
  CHECK(max_difference(s.get_weights(), state_of(*other)) == 0.0f);
  other->eval();
  auto const test = rows_of(0, 32);
  auto const expected =
      libtorch::cross_entropy(other->forward(::torch::from_blob(
                                  const_cast<float*>(test.features.data()), {32, 1, side, side})),
                              test);
  Net evaluator(s.model());
  CHECK(evaluator.evaluate(test).mean_loss() ==
        doctest::Approx(expected.item<float>()).epsilon(1e-5));
}

TEST_CASE("weights of another architecture are refused, naming every difference") {
  ::torch::manual_seed(1);
  nn::Sequential wider;
  wider->push_back("conv", nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)));
  wider->push_back(nn::ReLU());
  wider->push_back(nn::Flatten());
  wider->push_back("out", nn::Linear(8 * side * side, 3));
  Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> s{make_model(true)};
  auto const before = s.get_weights();
  auto const message = testing::message_of<LoadError>([&] { s.set_weights(state_of(*wider)); });
  CHECK(message.find("unknown: 'out.bias', 'out.weight'") != std::string::npos);
  CHECK(message.find("'bn.running_mean'") != std::string::npos);  // missing
  CHECK(message.find("'conv.weight' is {8, 1, 3, 3}, expected {4, 1, 3, 3}") != std::string::npos);
  CHECK((s.get_weights() == before));
}

TEST_CASE("a checkpointed run resumes exactly") {
  testing::TempDir dir("torch-checkpoint");
  auto fit = [&](std::int64_t steps, std::string const& ckpt) {
    Trainer<Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous>> trainer{
        Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous>{make_model(true),
                                                                           {.replicas = 2}},
        optim::Adam{.learning_rate = 0.01f}};
    trainer.fit(data, {.steps = steps, .batch_size = 32, .log = nullptr, .checkpoint_dir = ckpt});
    return trainer.get_weights();
  };
  auto const straight = fit(8, "");
  fit(4, (dir / "ckpt").string());
  auto const resumed = fit(8, (dir / "ckpt").string());
  CHECK(max_difference(straight, resumed) == 0.0f);
}

TEST_CASE(
    "under place::Gpu the model computes on the host, saying why, or is refused when strict") {
  std::ostringstream said;
  auto* const previous = std::clog.rdbuf(said.rdbuf());
  Strategy<Net, place::Gpu, comm::InProcess, sync::Synchronous> soft{make_model(false)};
  std::clog.rdbuf(previous);
  CHECK(said.str().find("libtorch::Model computes on the host") != std::string::npos);
  CHECK(said.str().find("running on the host (/cpu:0) instead") != std::string::npos);
  soft.set_optimizer(optim::Sgd{.learning_rate = 0.1f});
  soft.run(run_of(2, 16, 1));
  CHECK(soft.global_step() == 2);
  CHECK_THROWS_WITH_AS((Strategy<Net, place::Gpu, comm::InProcess, sync::Synchronous>{
                           make_model(false), {.strict = true}}),
                       doctest::Contains("libtorch::Model computes on the host"), PlacementError);
}
