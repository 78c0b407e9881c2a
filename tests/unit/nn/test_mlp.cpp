// Tests for nn/mlp.hpp and the layers it is made of (nn/dense.hpp, nn/relu.hpp, nn/losses.hpp):
// each layer and loss against a hand computation, then the whole Mlp's gradients against central
// finite differences of its loss, its evaluate() against forward_backward(), and its shape check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <convoy/core/batch.hpp>
#include <convoy/core/concepts.hpp>
#include <convoy/core/error.hpp>
#include <convoy/core/variables.hpp>
#include <convoy/nn/dense.hpp>
#include <convoy/nn/losses.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/nn/relu.hpp>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace test_nn_mlp {

convoy::exec::Host const host;

namespace {

using convoy::Batch;
using convoy::Metrics;
using convoy::ShapeError;
using convoy::Variables;
using convoy::nn::Dense;
using convoy::nn::Mlp;

static_assert(convoy::model<Mlp>);
static_assert(convoy::has_evaluate<Mlp>);

// A random classification batch: rows x cols features in [-1, 1] and labels in [0, classes).
struct RandomBatch {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  std::size_t rows;

  RandomBatch(std::size_t rows_, std::size_t cols, std::size_t classes, unsigned seed)
      : rows(rows_) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(classes) - 1);
    for (std::size_t i = 0; i < rows * cols; ++i) features.push_back(uniform(gen));
    for (std::size_t r = 0; r < rows; ++r) labels.push_back(label(gen));
  }
  Batch view() const { return Batch{features, labels, {}, rows}; }
};

}  // namespace

TEST_CASE("Dense forward is x W + b and backward gives x^T dy, column sums of dy and dy W^T") {
  Variables vars("t");
  Dense dense(vars, "d", 2, 3);
  CHECK(vars[dense.kernel()].name == "t/d/kernel");
  CHECK(vars[dense.bias()].name == "t/d/bias");
  CHECK(vars[dense.kernel()].shape == convoy::Shape{2, 3});
  CHECK(vars[dense.bias()].shape == convoy::Shape{3});
  CHECK(dense.inputs() == 2);
  CHECK(dense.outputs() == 3);

  // W = [[1, 2, 3], [4, 5, 6]], b = [0.5, -1, 2].
  std::vector<float> const w{1, 2, 3, 4, 5, 6};
  std::vector<float> const b{0.5f, -1.0f, 2.0f};
  std::copy(w.begin(), w.end(), vars.value(dense.kernel()).begin());
  std::copy(b.begin(), b.end(), vars.value(dense.bias()).begin());

  // x = [[1, 0], [2, -1]]
  std::vector<float> const x{1, 0, 2, -1};
  std::vector<float> y(6, 123.0f);  // garbage: forward must overwrite it
  dense.forward(host, vars, x, 2, y);
  // Row 0: [1, 2, 3] + b = [1.5, 1, 5]. Row 1: [2-4, 4-5, 6-6] + b = [-1.5, -2, 2].
  std::vector<float> const expected_y{1.5f, 1.0f, 5.0f, -1.5f, -2.0f, 2.0f};
  for (std::size_t i = 0; i < 6; ++i) CHECK(y[i] == doctest::Approx(expected_y[i]));

  // dy = [[1, 0, -1], [2, 1, 0]]
  std::vector<float> const dy{1, 0, -1, 2, 1, 0};
  std::fill(vars.grads().begin(), vars.grads().end(), 77.0f);  // backward must overwrite, not add
  std::vector<float> dx(4, 55.0f);
  dense.backward(host, vars, x, dy, 2, dx);
  // dW = x^T dy = [[1*1 + 2*2, 1*0 + 2*1, 1*-1 + 2*0], [0*1 - 1*2, 0*0 - 1*1, 0*-1 - 1*0]]
  std::vector<float> const expected_dw{5, 2, -1, -2, -1, 0};
  auto const dw = vars.grad(dense.kernel());
  for (std::size_t i = 0; i < 6; ++i) CHECK(dw[i] == doctest::Approx(expected_dw[i]));
  // db = [3, 1, -1]
  auto const db = vars.grad(dense.bias());
  CHECK(db[0] == doctest::Approx(3.0f));
  CHECK(db[1] == doctest::Approx(1.0f));
  CHECK(db[2] == doctest::Approx(-1.0f));
  // dx = dy W^T: row 0 [1 - 3, 4 - 6] = [-2, -2]; row 1 [2 + 2, 8 + 5] = [4, 13].
  CHECK(dx[0] == doctest::Approx(-2.0f));
  CHECK(dx[1] == doctest::Approx(-2.0f));
  CHECK(dx[2] == doctest::Approx(4.0f));
  CHECK(dx[3] == doctest::Approx(13.0f));

  // Without dx only the parameter gradients are written.
  dense.backward(host, vars, x, dy, 2, {});
  for (std::size_t i = 0; i < 6; ++i) CHECK(dw[i] == doctest::Approx(expected_dw[i]));
}

TEST_CASE(
    "Dense initialises its kernel Glorot-uniform from the set's generator and its bias to zero") {
  Variables a("s", 7), b("s", 7), c("s", 8);
  Dense da(a, "d", 20, 10), db(b, "d", 20, 10), dc(c, "d", 20, 10);
  CHECK(a.get_flat() == b.get_flat());
  CHECK(a.get_flat() != c.get_flat());
  float const limit = std::sqrt(6.0f / 30.0f);
  auto const kernel = a.value(da.kernel());
  bool any_nonzero = false;
  for (float w : kernel) {
    CHECK(std::abs(w) <= limit);
    any_nonzero = any_nonzero || w != 0.0f;
  }
  CHECK(any_nonzero);
  for (float v : a.value(da.bias())) CHECK(v == 0.0f);
  CHECK_THROWS_AS(Dense(a, "d", 2, 2), convoy::NameError);
}

TEST_CASE(
    "relu forward clamps at zero and backward passes gradients only where the output is positive") {
  std::vector<float> x{-2.0f, 0.0f, 3.0f, -0.5f, 1.5f};
  convoy::nn::relu_forward(host, x);
  std::vector<float> const expected{0.0f, 0.0f, 3.0f, 0.0f, 1.5f};
  CHECK(x == expected);

  std::vector<float> dy{10.0f, 20.0f, 30.0f, 40.0f, 50.0f};
  convoy::nn::relu_backward(host, x, dy);
  std::vector<float> const expected_dy{0.0f, 0.0f, 30.0f, 0.0f, 50.0f};
  CHECK(dy == expected_dy);
}

TEST_CASE("softmax_cross_entropy matches a hand computation and its gradient rows sum to zero") {
  // Row 0: logits {0, ln 2, 0}, label 1 -> softmax {1/4, 1/2, 1/4}, loss ln 2.
  // Row 1: logits {1, 2, 3}, label 0 -> loss log(e + e^2 + e^3) - 1.
  float const ln2 = std::log(2.0f);
  std::vector<float> const logits{0.0f, ln2, 0.0f, 1.0f, 2.0f, 3.0f};
  std::vector<std::int32_t> const labels{1, 0};
  std::vector<float> grad(6, 99.0f);

  double const e = std::exp(1.0);
  double const loss1 = std::log(e + e * e + e * e * e) - 1.0;
  float const loss = convoy::nn::softmax_cross_entropy(host, logits, labels, 2, 3, grad);
  CHECK(loss == doctest::Approx((std::log(2.0) + loss1) / 2.0).epsilon(1e-6));

  // Gradient of the mean: (softmax - onehot) / rows.
  CHECK(grad[0] == doctest::Approx(0.25 / 2).epsilon(1e-6));
  CHECK(grad[1] == doctest::Approx(-0.5 / 2).epsilon(1e-6));
  CHECK(grad[2] == doctest::Approx(0.25 / 2).epsilon(1e-6));
  double const z = e + e * e + e * e * e;
  CHECK(grad[3] == doctest::Approx((e / z - 1.0) / 2).epsilon(1e-6));
  CHECK(grad[4] == doctest::Approx(e * e / z / 2).epsilon(1e-6));
  CHECK(grad[5] == doctest::Approx(e * e * e / z / 2).epsilon(1e-6));
  for (std::size_t r = 0; r < 2; ++r) {
    CHECK(grad[r * 3] + grad[r * 3 + 1] + grad[r * 3 + 2] ==
          doctest::Approx(0.0).epsilon(1e-6).scale(1.0));
  }

  // One row alone: the loss is ln 2 and the gradient is not divided.
  std::vector<float> one(3);
  float const single =
      convoy::nn::softmax_cross_entropy(host, std::span(logits).first(3), labels, 1, 3, one);
  CHECK(single == doctest::Approx(std::log(2.0)).epsilon(1e-6));
  CHECK(one[1] == doctest::Approx(-0.5).epsilon(1e-6));

  // Large logits do not overflow.
  std::vector<float> const big{1000.0f, 1000.0f + ln2, 1000.0f};
  float const stable = convoy::nn::softmax_cross_entropy(host, big, labels, 1, 3, one);
  CHECK(std::isfinite(stable));
  CHECK(stable == doctest::Approx(std::log(2.0)).epsilon(1e-4));
}

TEST_CASE("softmax_cross_entropy_metrics sums the loss and counts correct predictions") {
  float const ln2 = std::log(2.0f);
  // Argmaxes: 1, 2, 0, 1.
  std::vector<float> const logits{0.0f, ln2,  0.0f,    // label 1: correct, loss ln 2
                                  1.0f, 2.0f, 3.0f,    // label 0: wrong
                                  5.0f, 1.0f, 1.0f,    // label 0: correct
                                  0.0f, 3.0f, -1.0f};  // label 2: wrong
  std::vector<std::int32_t> const labels{1, 0, 0, 2};
  Metrics const m = convoy::nn::softmax_cross_entropy_metrics(convoy::exec::Host{}, logits, labels, 4, 3);
  CHECK(m.count == 4);
  CHECK(m.correct == 2);
  double expected = 0.0;
  for (std::size_t r = 0; r < 4; ++r) {
    double z = 0.0;
    for (std::size_t j = 0; j < 3; ++j) z += std::exp(static_cast<double>(logits[r * 3 + j]));
    expected += std::log(z) - logits[r * 3 + static_cast<std::size_t>(labels[r])];
  }
  CHECK(m.loss_sum == doctest::Approx(expected).epsilon(1e-5));
  CHECK(m.accuracy() == doctest::Approx(0.5));
  CHECK(m.mean_loss() == doctest::Approx(expected / 4).epsilon(1e-5));
}

TEST_CASE("mean_squared_error value and gradient") {
  std::vector<float> const prediction{1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> const target{0.0f, 2.0f, 5.0f, 4.5f};
  std::vector<float> grad(4, 99.0f);
  // diffs {1, 0, -2, -0.5}: mean of squares (1 + 0 + 4 + 0.25) / 4; gradient 2 diff / 4.
  float const loss = convoy::nn::mean_squared_error(prediction, target, grad);
  CHECK(loss == doctest::Approx(5.25 / 4));
  CHECK(grad[0] == doctest::Approx(0.5));
  CHECK(grad[1] == doctest::Approx(0.0));
  CHECK(grad[2] == doctest::Approx(-1.0));
  CHECK(grad[3] == doctest::Approx(-0.25));

  // Without a gradient buffer only the value is computed.
  CHECK(convoy::nn::mean_squared_error(prediction, target, {}) == doctest::Approx(5.25 / 4));
}

TEST_CASE("Mlp names its variables per layer under its scope") {
  Mlp mlp({5, 7, 3});
  auto const list = mlp.variables().list();
  REQUIRE(list.size() == 4);
  CHECK(list[0].name == "mlp/layer1/kernel");
  CHECK(list[0].shape == convoy::Shape{5, 7});
  CHECK(list[1].name == "mlp/layer1/bias");
  CHECK(list[2].name == "mlp/layer2/kernel");
  CHECK(list[2].shape == convoy::Shape{7, 3});
  CHECK(list[3].name == "mlp/layer2/bias");
  CHECK(mlp.variables().element_count() == 5 * 7 + 7 + 7 * 3 + 3);
  CHECK(mlp.layers().size() == 2);

  Mlp scoped({2, 2}, "gen");
  CHECK(scoped.variables().list()[0].name == "gen/layer1/kernel");
  CHECK_THROWS_AS(Mlp({4}), convoy::Error);
}

TEST_CASE("Mlp gradients match central finite differences") {
  Mlp mlp({5, 7, 3}, "mlp", 2024);
  Variables& vars = mlp.variables();
  // Non-zero biases, so their gradients are checked in general position.
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> small(-0.2f, 0.2f);
  for (auto const& v : vars.list()) {
    if (v.shape.size() == 1) {
      for (float& b : vars.value(vars.at(v.name))) b = small(gen);
    }
  }
  RandomBatch const data(4, 5, 3, 5);
  Batch const batch = data.view();

  // forward_backward overwrites the gradients: garbage before it changes nothing.
  std::fill(vars.grads().begin(), vars.grads().end(), 1e6f);
  float const loss = mlp.forward_backward(batch);
  std::vector<float> const analytic(vars.grads().begin(), vars.grads().end());
  CHECK(std::isfinite(loss));
  CHECK(loss > 0.0f);
  mlp.forward_backward(batch);
  CHECK(std::vector<float>(vars.grads().begin(), vars.grads().end()) == analytic);

  float const eps = 1e-3f;
  std::size_t checked = 0;
  std::size_t nonzero = 0;
  for (auto const& v : vars.list()) {
    // Up to 30 distinct elements of each variable (all of the small ones).
    std::vector<std::size_t> picks(v.size);
    for (std::size_t i = 0; i < v.size; ++i) picks[i] = i;
    std::shuffle(picks.begin(), picks.end(), gen);
    picks.resize(std::min<std::size_t>(30, v.size));
    for (std::size_t i : picks) {
      float& w = vars.weights()[v.offset + i];
      float const saved = w;
      w = saved + eps;
      double const plus = mlp.forward_backward(batch);
      w = saved - eps;
      double const minus = mlp.forward_backward(batch);
      w = saved;
      double const numeric = (plus - minus) / (2.0 * eps);
      double const exact = analytic[v.offset + i];
      INFO(v.name, "[", i, "] analytic ", exact, " numeric ", numeric);
      CHECK(std::abs(numeric - exact) <=
            2e-2 * std::max(std::abs(numeric), std::abs(exact)) + 2e-4);
      ++checked;
      if (std::abs(exact) > 1e-3) ++nonzero;
    }
  }
  CHECK(checked == 30 + 7 + 21 + 3);
  // Most checked gradients are far from zero, so the relative tolerance is what is tested.
  CHECK(nonzero > checked / 2);
}

TEST_CASE("Mlp::evaluate agrees with forward_backward and touches no gradient") {
  Mlp mlp({5, 7, 3}, "mlp", 99);
  RandomBatch const data(6, 5, 3, 21);
  Batch const batch = data.view();
  auto& vars = mlp.variables();

  std::fill(vars.grads().begin(), vars.grads().end(), 42.0f);
  Metrics const m = mlp.evaluate(batch);
  for (float g : vars.grads()) CHECK(g == 42.0f);
  CHECK(m.count == 6);

  float const loss = mlp.forward_backward(batch);
  CHECK(m.loss_sum / 6.0 == doctest::Approx(loss).epsilon(1e-5));

  // Correct predictions, from logits computed layer by layer here.
  std::vector<float> hidden(6 * 7), logits(6 * 3);
  mlp.layers()[0].forward(host, vars, data.features, 6, hidden);
  convoy::nn::relu_forward(host, hidden);
  mlp.layers()[1].forward(host, vars, hidden, 6, logits);
  std::size_t correct = 0;
  for (std::size_t r = 0; r < 6; ++r) {
    auto const row = std::span(logits).subspan(r * 3, 3);
    auto const arg =
        static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    correct += arg == data.labels[r] ? 1 : 0;
  }
  CHECK(m.correct == correct);

  // Labels set to the predictions make every example correct.
  RandomBatch predicted = data;
  for (std::size_t r = 0; r < 6; ++r) {
    auto const row = std::span(logits).subspan(r * 3, 3);
    predicted.labels[r] =
        static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  }
  CHECK(mlp.evaluate(predicted.view()).correct == 6);
}

TEST_CASE("Mlp throws ShapeError for a batch with the wrong number of columns") {
  Mlp mlp({5, 7, 3});
  RandomBatch const wide(4, 6, 3, 1);
  RandomBatch const narrow(4, 4, 3, 1);
  CHECK_THROWS_AS(mlp.forward_backward(wide.view()), ShapeError);
  CHECK_THROWS_AS(mlp.evaluate(narrow.view()), ShapeError);
  try {
    mlp.forward_backward(wide.view());
  } catch (ShapeError const& e) {
    std::string const what = e.what();
    CHECK(what.find("mlp") != std::string::npos);
    CHECK(what.find('5') != std::string::npos);
    CHECK(what.find('6') != std::string::npos);
  }
  // The right width works.
  RandomBatch const right(4, 5, 3, 1);
  CHECK_NOTHROW(mlp.forward_backward(right.view()));
}

}  // namespace test_nn_mlp
