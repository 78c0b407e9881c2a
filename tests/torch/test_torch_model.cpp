// libtorch::Model: a LibTorch module trained by convoy's strategies matches plain LibTorch step for
// step, replicas match one replica at the whole batch, BatchNorm's statistics follow the buffer
// rule, weights travel by LibTorch's names both ways (convoy's files, checkpoints and LibTorch's
// .pt), checkpoints resume exactly, a module of another architecture is refused by name, and
// LibTorch's errors name the shapes, the stage and the labels.
// clang-format off
#include <torch_first.hpp>  // before doctest: LibTorch's glog defines CHECK
// clang-format on
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <convoy/io/weights.hpp>
#include <convoy/strategy.hpp>
#include <convoy/torch/module_weights.hpp>
#include <convoy/torch/pt_archive.hpp>
#include <convoy/torch/trained_weights.hpp>
#include <convoy/train/trainer.hpp>
#include <cstddef>
#include <functional>
#include <helpers.hpp>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <thread>
#include <utility>
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

TEST_CASE("for the lock-step sum, gradients stay in the tensors autograd made, not copied") {
  auto m = make_model(true);
  auto& vars = m.variables();
  m.forward_backward(rows_of(0, 8));
  std::vector<float> const copied(vars.grads().begin(), vars.grads().end());
  std::ranges::fill(vars.grads(), -1.0f);
  GradientPlaces places(vars);
  m.forward_backward(rows_of(0, 8), exec::Host{}, places);
  CHECK(places.left());
  for (std::size_t v = 0; v < vars.size(); ++v) {
    auto const& var = vars.list()[v];
    CAPTURE(var.name);
    float const* const home = vars.grads().data() + var.offset;
    std::vector<float> const expected(
        copied.begin() + static_cast<std::ptrdiff_t>(var.offset),
        copied.begin() + static_cast<std::ptrdiff_t>(var.offset + var.size));
    // Parameters: autograd's tensor, the arena untouched; BatchNorm's buffers: their change, in
    // the arena.
    CHECK((places.of(v) != home) == var.trainable);
    CHECK(std::equal(expected.begin(), expected.end(), places.of(v)));
    if (var.trainable)
      CHECK(std::all_of(home, home + var.size, [](float g) { return g == -1.0f; }));
  }
  // The module's grads are the arena's views again, and settle() fills the arena.
  CHECK(m.net()->parameters()[0].grad().data_ptr<float>() == vars.grads().data());
  places.settle();
  CHECK(std::ranges::equal(vars.grads(), copied));
}

TEST_CASE(
    "get_gradients in and after a lock-step run: the mean of the replicas' LibTorch gradients") {
  // One model on the whole batch of 32 rows gives the mean the two replicas' 16 rows each make.
  auto whole = make_model(false);
  whole.forward_backward(rows_of(0, 32));
  auto const expected = whole.variables().named(whole.variables().grads());
  Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous> two{make_model(false),
                                                                         {.replicas = 2}};
  auto plan = run_of(1, 32, 2);
  std::map<std::string, Tensor> during;
  plan.after_step = [&](StepReport const&) {
    during = two.get_gradients();
    return true;
  };
  two.run(plan);
  for (auto const& seen : {during, two.get_gradients()}) {
    REQUIRE(seen.size() == expected.size());
    for (auto const& [name, tensor] : expected) {
      CAPTURE(name);
      auto const& got = seen.at(name).data;
      for (std::size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == doctest::Approx(tensor.data[i]).epsilon(1e-4));
    }
  }
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

// A layer applied twice, and one the loss never reaches.
struct TiedImpl : nn::Module {
  TiedImpl()
      : twice(register_module("twice", nn::Linear(side * side, side * side))),
        unused(register_module("unused", nn::Linear(side * side, 3))),
        out(register_module("out", nn::Linear(side * side, 3))) {}
  ::torch::Tensor forward(::torch::Tensor x) {
    x = x.view({x.size(0), side * side});
    return out(::torch::relu(twice(::torch::relu(twice(x)))));
  }
  nn::Linear twice, unused, out;
};
TORCH_MODULE(Tied);

TEST_CASE("a layer used twice gets its summed gradient, one the loss misses a zero one") {
  auto const batch = rows_of(0, 8);
  ::torch::manual_seed(3);
  Tied plain;
  auto const x = ::torch::from_blob(const_cast<float*>(batch.features.data()), {8, side * side});
  libtorch::cross_entropy(plain->forward(x), batch).backward();

  ::torch::manual_seed(3);
  libtorch::Model<Tied> m([] { return Tied(); });
  auto& vars = m.variables();
  std::ranges::fill(vars.grads(), 1.0f);  // what a previous step left
  std::size_t announced = 0;
  auto count = [&](VariableId first, VariableId last) {
    announced += last.index - first.index + 1;
  };
  m.forward_backward(batch, GradientsReady(count));
  CHECK(announced == vars.size());
  for (auto const& item : plain->named_parameters()) {
    CAPTURE(item.key());
    auto const grad = vars.grad(vars.at(item.key()));
    if (item.key().starts_with("unused")) {
      CHECK_FALSE(item.value().grad().defined());
      CHECK(std::ranges::all_of(grad, [](float g) { return g == 0.0f; }));
      continue;
    }
    auto const expected = item.value().grad().contiguous();
    REQUIRE(static_cast<std::size_t>(expected.numel()) == grad.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < grad.size(); ++i)
      worst = std::max(worst, std::abs(grad[i] - expected.data_ptr<float>()[i]));
    CHECK(worst < 1e-6f);
  }
  // After the pass the parameters' grads are the arena again, so a backward pass the user runs
  // outside forward_backward accumulates there, as LibTorch's own does.
  auto const params = m.net()->parameters();
  CHECK(params[0].grad().data_ptr<float>() == vars.grads().data());
  std::vector<float> const once(vars.grads().begin(), vars.grads().end());
  auto module = m.net();  // a handle of the same module
  libtorch::cross_entropy(module->forward(x), batch).backward();
  auto const first = vars.grad(VariableId{0});
  float worst = 0.0f;
  for (std::size_t i = 0; i < first.size(); ++i)
    worst = std::max(worst, std::abs(first[i] - 2.0f * once[i]));
  CHECK(worst < 1e-6f);
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
    CHECK(max_difference(strategy.get_weights(), libtorch::module_weights(*plain)) < 1e-5f);
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

TEST_CASE("mixed precision: the forward pass in bfloat16, the weights and gradients in float32") {
  // The loss sees the module's output: its type says what the forward pass computed in.
  auto const trained = [](std::optional<::torch::ScalarType> autocast, ::torch::ScalarType* seen) {
    ::torch::manual_seed(7);
    Net model([] { return conv_net(true); },
              {.row_shape = {1, side, side},
               .loss =
                   [seen](::torch::Tensor const& output, Batch const& batch) {
                     *seen = output.scalar_type();
                     return libtorch::cross_entropy(output.to(::torch::kFloat), batch);
                   },
               .autocast = autocast});
    Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> strategy{std::move(model)};
    strategy.set_optimizer(optim::Momentum{.learning_rate = 0.05f});
    std::vector<float> losses;
    strategy.run(run_of(8, 32, 1, &losses));
    for (auto const& p : strategy.model().net()->parameters()) {
      CHECK((p.scalar_type() == ::torch::kFloat));
      CHECK((p.grad().scalar_type() == ::torch::kFloat));
    }
    return std::pair{strategy.get_weights(), losses};
  };
  ::torch::ScalarType plain_type = ::torch::kDouble, mixed_type = ::torch::kDouble;
  auto const [plain, plain_losses] = trained(std::nullopt, &plain_type);
  auto const [mixed, mixed_losses] = trained(::torch::kBFloat16, &mixed_type);
  CHECK((plain_type == ::torch::kFloat));
  CHECK((mixed_type == ::torch::kBFloat16));
  // bfloat16 keeps 8 bits of mantissa: the runs part, but not by much.
  float const apart = max_difference(plain, mixed);
  MESSAGE("after 8 steps, bfloat16 against float32: largest weight difference " << apart);
  CHECK(apart > 0.0f);
  CHECK(apart < 0.05f);
  REQUIRE(mixed_losses.size() == plain_losses.size());
  for (std::size_t s = 0; s < plain_losses.size(); ++s)
    CHECK(mixed_losses[s] == doctest::Approx(plain_losses[s]).epsilon(0.03));
}

TEST_CASE("the autocast guard nests, and puts the thread's state back as it found it") {
  using libtorch::detail::Autocast;
  using libtorch::detail::autocast_enabled;
  using libtorch::detail::autocast_type;
  auto const cpu = c10::DeviceType::CPU;
  REQUIRE_FALSE(autocast_enabled(cpu));
  auto const type = autocast_type(cpu);
  auto const x = ::torch::ones({2, 2});
  {
    Autocast const outer(::torch::kBFloat16, ::torch::kCPU);
    CHECK(autocast_enabled(cpu));
    CHECK((autocast_type(cpu) == ::torch::kBFloat16));
    CHECK((::torch::mm(x, x).scalar_type() == ::torch::kBFloat16));
    {
      Autocast const none(std::nullopt, ::torch::kCPU);
      Autocast const inner(::torch::kBFloat16, ::torch::kCPU);
      CHECK(autocast_enabled(cpu));
    }
    CHECK(autocast_enabled(cpu));  // the inner one gave back what it found
    CHECK((autocast_type(cpu) == ::torch::kBFloat16));
  }
  CHECK_FALSE(autocast_enabled(cpu));
  CHECK((autocast_type(cpu) == type));
  CHECK((::torch::mm(x, x).scalar_type() == ::torch::kFloat));
  CHECK_THROWS_WITH_AS(Autocast(::torch::kInt, ::torch::kCPU),
                       doctest::Contains("autocast computes in ::torch::kBFloat16"), Error);
  CHECK_FALSE(autocast_enabled(cpu));
}

TEST_CASE("BatchNorm's statistics: a synchronous step keeps the mean of the replicas'") {
  // Two plain copies, each in train mode on its half of the batch: the expected statistics are the
  // mean of theirs.
  ::torch::manual_seed(7);
  auto a = conv_net(true), b = conv_net(true);
  libtorch::set_module_weights(*b, libtorch::module_weights(*a));
  auto forward = [](nn::Sequential& net, Batch const& half) {
    net->train();
    net->forward(::torch::from_blob(const_cast<float*>(half.features.data()),
                                    {static_cast<std::int64_t>(half.rows), 1, side, side}));
  };
  forward(a, rows_of(0, 16));
  forward(b, rows_of(16, 16));
  auto const sa = libtorch::module_weights(*a), sb = libtorch::module_weights(*b);

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
    libtorch::set_module_weights(*reference, w);
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

TEST_CASE("evaluate() in slices of evaluate_rows sums to the whole batch's metrics") {
  // A trained BatchNorm net, so that eval() mode matters; 100 rows in slices of 7 (the last one 2
  // rows) against one pass over all of them.
  auto whole = make_model(true);
  whole.forward_backward(rows_of(0, 32));
  auto const test = rows_of(64, 100);
  auto with_slices = [&](std::size_t rows) {
    Net model([] { return conv_net(true); }, {.row_shape = {1, side, side}, .evaluate_rows = rows});
    model.variables().set_flat(whole.variables().get_flat());
    return model;
  };
  auto sliced = with_slices(7), one_pass = with_slices(0);
  auto const a = sliced.evaluate(test), b = one_pass.evaluate(test);
  CHECK(a.count == 100);
  CHECK(a.correct == b.correct);
  CHECK(a.loss_sum == doctest::Approx(b.loss_sum).epsilon(1e-5));
  // A batch whose features do not fit its rows is still refused, naming the row shape.
  Batch bad = test;
  bad.features = bad.features.first(bad.features.size() - 1);
  CHECK_THROWS_WITH_AS(sliced.evaluate(bad), doctest::Contains("row shape {1, 4, 4}"), ShapeError);
}

TEST_CASE("weights travel by LibTorch's names between convoy's files and a plain module") {
  testing::TempDir dir("torch-weights");
  auto m = make_model(true);
  m.forward_backward(rows_of(0, 16));
  // convoy -> plain LibTorch: a weights file read back by name into a fresh module.
  io::save_named(dir / "w.bin", m.variables().get_weights(), io::Format::binary);
  auto plain = conv_net(true);
  libtorch::set_module_weights(*plain, io::load_named(dir / "w.bin", io::Format::binary));
  CHECK(max_difference(libtorch::module_weights(*plain), m.variables().get_weights()) == 0.0f);
  // plain LibTorch -> convoy: a module trained elsewhere, set by name.
  ::torch::manual_seed(99);
  auto other = conv_net(true);
  Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous> s{make_model(true),
                                                                       {.replicas = 2}};
  s.set_weights(libtorch::module_weights(*other));
  CHECK(max_difference(s.get_weights(), libtorch::module_weights(*other)) == 0.0f);
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
  auto const message =
      testing::message_of<LoadError>([&] { s.set_weights(libtorch::module_weights(*wider)); });
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
    "under place::Gpu without convoy::cuda the model computes on the host, saying why, or is "
    "refused when strict") {
  std::ostringstream said;
  auto* const previous = std::clog.rdbuf(said.rdbuf());
  Strategy<Net, place::Gpu, comm::InProcess, sync::Synchronous> soft{make_model(false)};
  std::clog.rdbuf(previous);
  CHECK(said.str().find("libtorch::Model computes on the host") != std::string::npos);
  CHECK(said.str().find("running on the host (/cpu:0) instead") != std::string::npos);
  // Why, as it is: a program that does not link convoy::cuda (a CUDA build of LibTorch, PyPI's
  // 2.x), or a LibTorch without CUDA.
  CHECK(said.str().find(at::hasCUDA() ? "link convoy::cuda" : "this LibTorch has no CUDA") !=
        std::string::npos);
  soft.set_optimizer(optim::Sgd{.learning_rate = 0.1f});
  soft.run(run_of(2, 16, 1));
  CHECK(soft.global_step() == 2);
  CHECK_THROWS_WITH_AS((Strategy<Net, place::Gpu, comm::InProcess, sync::Synchronous>{
                           make_model(false), {.strict = true}}),
                       doctest::Contains("libtorch::Model computes on the host"), PlacementError);
}

namespace {

using Mirrored = Strategy<Net, place::Mirrored, comm::InProcess, sync::Synchronous>;

Trainer<Mirrored> fresh_trainer() {
  return Trainer<Mirrored>{Mirrored{make_model(true), {.replicas = 2}},
                           optim::Adam{.learning_rate = 0.01f}};
}

// A few steps, so that weights and running statistics differ from any fresh module's.
void train_a_little(Trainer<Mirrored>& trainer, std::string const& checkpoint_dir = "") {
  trainer.fit(data,
              {.steps = 4, .batch_size = 32, .log = nullptr, .checkpoint_dir = checkpoint_dir});
}

// The module's outputs for rows [0, 64) in eval() mode: a row of logits per row of the data.
::torch::Tensor predictions(nn::Sequential net) {
  auto const test = rows_of(0, 64);
  net->eval();
  ::torch::NoGradGuard no_grad;
  return net->forward(
      ::torch::from_blob(const_cast<float*>(test.features.data()), {64, 1, side, side}));
}

// The trained model's own outputs: a copy of it evaluates once, which loads the running
// statistics convoy holds into its module and leaves it in eval() mode.
::torch::Tensor predictions(Net const& model) {
  Net copy(model);
  copy.evaluate(rows_of(0, 64));
  return predictions(copy.net());
}

// The same architecture with the classifier renamed and the convolution wider, without BatchNorm.
nn::Sequential wider_net() {
  nn::Sequential wider;
  wider->push_back("conv", nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)));
  wider->push_back(nn::ReLU());
  wider->push_back(nn::Flatten());
  wider->push_back("out", nn::Linear(8 * side * side, 3));
  return wider;
}

// What loading the wider net's file into the BatchNorm net must say: every name, sorted.
void check_names_every_difference(std::string const& message) {
  CAPTURE(message);
  CHECK(message.find("unknown: 'out.bias', 'out.weight'") != std::string::npos);
  CHECK(message.find("missing: 'bn.bias', 'bn.num_batches_tracked', 'bn.running_mean', "
                     "'bn.running_var', 'bn.weight', 'fc.bias', 'fc.weight'") != std::string::npos);
  CHECK(message.find("mis-shaped: 'conv.bias' is {8}, expected {4}, 'conv.weight' is {8, 1, 3, 3}, "
                     "expected {4, 1, 3, 3}") != std::string::npos);
}

}  // namespace

TEST_CASE("convoy's .pt is LibTorch's: torch::load reads it into a plain module") {
  testing::TempDir dir("torch-pt-out");
  auto trainer = fresh_trainer();
  train_a_little(trainer);
  // example-begin pt-out
  libtorch::save_weights(trainer, dir / "model.pt");  // a Trainer's or a Strategy's
  auto plain = conv_net(true);                        // the same architecture, no convoy in it
  ::torch::load(plain, (dir / "model.pt").string());
  // example-end pt-out
  CHECK(max_difference(libtorch::module_weights(*plain), trainer.get_weights()) == 0.0f);
  // Row by row, the same logits as the trained model, running statistics included.
  auto const expected = predictions(trainer.model());
  auto const got = predictions(plain);
  REQUIRE((got.sizes() == expected.sizes()));
  CHECK(::torch::equal(got, expected));
  CHECK(::torch::equal(got.argmax(1), expected.argmax(1)));
  // LibTorch's types kept: the step counter is an integer buffer, as torch::save writes it.
  CHECK((plain->named_buffers()["bn.num_batches_tracked"].scalar_type() == ::torch::kLong));
  CHECK(plain->named_buffers()["bn.num_batches_tracked"].item<std::int64_t>() > 0);
}

TEST_CASE("a module torch::save wrote trains on under convoy, predicting the same") {
  testing::TempDir dir("torch-pt-in");
  ::torch::manual_seed(99);
  auto other = conv_net(true);
  other->train();
  other->forward(::torch::randn({8, 1, side, side}));  // running statistics of its own
  // example-begin pt-in
  ::torch::save(other, (dir / "other.pt").string());  // a plain module, trained elsewhere
  auto trainer = fresh_trainer();
  libtorch::load_weights(trainer, dir / "other.pt");  // by name, every difference reported
  // example-end pt-in
  CHECK(max_difference(libtorch::load_pt(dir / "other.pt"), libtorch::module_weights(*other)) ==
        0.0f);
  CHECK(max_difference(trainer.get_weights(), libtorch::module_weights(*other)) == 0.0f);
  CHECK(::torch::equal(predictions(trainer.model()), predictions(other)));
  // The strategy's own call takes it too.
  Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> host{make_model(true)};
  libtorch::load_weights(host, dir / "other.pt");
  CHECK(max_difference(host.get_weights(), libtorch::module_weights(*other)) == 0.0f);
}

TEST_CASE("a plain module's .pt is the file torch::save writes") {
  testing::TempDir dir("torch-pt-same");
  ::torch::manual_seed(5);
  auto plain = conv_net(true);
  libtorch::save_module_weights(*plain, dir / "ours.pt");
  ::torch::save(plain, (dir / "theirs.pt").string());
  CHECK(max_difference(libtorch::load_pt(dir / "ours.pt"), libtorch::load_pt(dir / "theirs.pt")) ==
        0.0f);
  auto read_back = conv_net(true);
  ::torch::load(read_back, (dir / "ours.pt").string());
  CHECK(::torch::equal(predictions(read_back), predictions(plain)));
}

TEST_CASE("convoy's weights files and checkpoints load into a plain module by name") {
  testing::TempDir dir("torch-module-in");
  auto trainer = fresh_trainer();
  train_a_little(trainer, (dir / "ckpt").string());
  auto const weights = trainer.get_weights();
  trainer.save_weights(dir / "w.pbin");
  libtorch::save_weights(trainer, dir / "w.bin");
  for (auto const& file : {dir / "w.pbin", dir / "w.bin", *io::latest_checkpoint(dir / "ckpt")}) {
    CAPTURE(file);
    // example-begin module-in
    auto plain = conv_net(true);                  // .bin, .pbin, .json, checkpoint-*.convoy, .pt
    libtorch::load_module_weights(*plain, file);  // by name, every difference reported
    // example-end module-in
    CHECK(max_difference(libtorch::module_weights(*plain), weights) == 0.0f);
    CHECK(::torch::equal(predictions(plain), predictions(trainer.model())));
  }
}

TEST_CASE("a plain module saved as a convoy weights file loads into a strategy") {
  testing::TempDir dir("torch-module-out");
  ::torch::manual_seed(11);
  auto plain = conv_net(true);
  libtorch::save_module_weights(*plain, dir / "plain.json");
  // example-begin module-out
  libtorch::save_module_weights(*plain, dir / "plain.bin");  // the format the extension names
  auto trainer = fresh_trainer();
  trainer.load_weights(dir / "plain.bin");  // convoy's own loader, no LibTorch in it
  // example-end module-out
  CHECK(max_difference(trainer.get_weights(), libtorch::module_weights(*plain)) == 0.0f);
  Variables vars = make_model(true).variables();
  io::load_weights(dir / "plain.json", vars);
  CHECK(max_difference(vars.get_weights(), libtorch::module_weights(*plain)) == 0.0f);
}

TEST_CASE("a file of another architecture is refused by every loader, naming every difference") {
  testing::TempDir dir("torch-wrong");
  ::torch::manual_seed(1);
  auto wider = wider_net();
  ::torch::save(wider, (dir / "wider.pt").string());
  libtorch::save_module_weights(*wider, dir / "wider.bin");

  Strategy<Net, place::Host, comm::InProcess, sync::Synchronous> s{make_model(true)};
  auto const before = s.get_weights();
  for (auto const& file : {dir / "wider.pt", dir / "wider.bin"}) {
    CAPTURE(file);
    auto const message = testing::message_of<LoadError>([&] { libtorch::load_weights(s, file); });
    CHECK(message.find("loading '" + file.string() + "'") != std::string::npos);
    check_names_every_difference(message);
    CHECK((s.get_weights() == before));

    auto plain = conv_net(true);
    auto const untouched = libtorch::module_weights(*plain);
    check_names_every_difference(
        testing::message_of<LoadError>([&] { libtorch::load_module_weights(*plain, file); }));
    CHECK(max_difference(libtorch::module_weights(*plain), untouched) == 0.0f);
  }
  // And the other way: convoy's weights are refused by a plain module of the wider net.
  auto const refused = testing::message_of<LoadError>(
      [&] { libtorch::set_module_weights(*wider, before, "set_module_weights"); });
  CHECK(refused.find("unknown: 'bn.bias'") != std::string::npos);
  CHECK(refused.find("missing: 'out.bias', 'out.weight'") != std::string::npos);
}

TEST_CASE("a .pt path is checked and read as LibTorch's, other names as convoy's formats") {
  testing::TempDir dir("torch-pt-names");
  CHECK(libtorch::is_pt_file("model.pt"));
  CHECK_FALSE(libtorch::is_pt_file("model.pth"));
  CHECK_NOTHROW(libtorch::require_writable_weights_file(dir / "model.pt"));
  CHECK_THROWS_WITH_AS(libtorch::require_writable_weights_file(dir / "model.pth"),
                       doctest::Contains("libtorch::save_weights"), Error);
  io::save_named(dir / "fake.pt", make_model(false).variables().get_weights(), io::Format::binary);
  auto const message = testing::message_of<LoadError>(
      [&] { static_cast<void>(libtorch::load_pt(dir / "fake.pt")); });
  CHECK(message.find("'" + (dir / "fake.pt").string() + "' cannot be read as LibTorch's archive") !=
        std::string::npos);
}

namespace {

constexpr std::size_t image_rows = 64;
io::Dataset const images = testing::synthetic_classes(image_rows, 28 * 28, 10);

std::string failure_of(std::function<void()> const& f) { return testing::message_of<Error>(f); }

}  // namespace

TEST_CASE("LibTorch's errors name the module's input, its output, the loss and the labels") {
  auto const batch = images.slice(0, image_rows);
  auto const labels = [&] {
    auto const [low, high] = std::ranges::minmax(batch.labels);
    return std::to_string(low) + ".." + std::to_string(high);
  }();
  SUBCASE("a row_shape without the channel: the module's forward pass fails") {
    libtorch::Model<nn::Sequential> model(
        [] {
          nn::Sequential net;
          net->push_back(nn::Conv2d(nn::Conv2dOptions(1, 8, 3)));
          net->push_back(nn::Flatten());
          return net;
        },
        {.row_shape = {28, 28}});
    auto const message = failure_of([&] { model.forward_backward(batch); });
    CAPTURE(message);
    CHECK(message.starts_with("convoy: libtorch::Model::forward_backward: the module's forward"));
    CHECK(message.find("input was {64, 28, 28} (rows, then row_shape {28, 28})") !=
          std::string::npos);
    CHECK(message.find("labels " + labels) != std::string::npos);
    CHECK(message.find("\nLibTorch: ") != std::string::npos);
    CHECK(message.find("to have 1 channels") != std::string::npos);     // LibTorch's own words
    CHECK(message.find("Exception raised from") == std::string::npos);  // no C++ stack trace
  }
  SUBCASE("an output cross-entropy cannot take: the loss fails, naming the output") {
    libtorch::Model<nn::Sequential> model(
        [] {
          nn::Sequential net;
          net->push_back(nn::Conv2d(nn::Conv2dOptions(1, 32, 4).stride(4)));
          return net;
        },
        {.row_shape = {1, 28, 28}});
    for (auto const* call : {"forward_backward", "evaluate"}) {
      CAPTURE(call);
      auto const message = failure_of([&] {
        if (std::string_view(call) == "evaluate") {
          model.evaluate(batch);
        } else {
          model.forward_backward(batch);
        }
      });
      CAPTURE(message);
      CHECK(message.starts_with(std::string("convoy: libtorch::Model::") + call +
                                ": the loss failed on the module's output {64, 32, 7, 7}"));
      CHECK(message.find("input was {64, 1, 28, 28}") != std::string::npos);
      CHECK(message.find("labels " + labels) != std::string::npos);
      CHECK(message.find("\nLibTorch: ") != std::string::npos);
      CHECK(message.find("Exception raised from") == std::string::npos);
    }
  }
}
