// Tests for core/variables.hpp: names (scoped, looked up, duplicated, unknown), the arena layout
// (offsets contiguous in declaration order, flat views aliasing per-variable views), flat and
// by-name get/set with their errors, shared storage through bind_weights and the copy rule, and
// the seeded generator.
#include <doctest/doctest.h>

#include <algorithm>
#include <convoy/core/error.hpp>
#include <convoy/core/tensor.hpp>
#include <convoy/core/variables.hpp>
#include <cstddef>
#include <cstdint>
#include <helpers.hpp>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace test_core_variables {

using convoy::testing::message_of;

namespace {

using convoy::LoadError;
using convoy::NameError;
using convoy::Shape;
using convoy::ShapeError;
using convoy::Tensor;
using convoy::VariableId;
using convoy::Variables;

// A set with three variables of different sizes: a/kernel {2, 3}, a/bias {3}, b/kernel {3, 1}.
Variables three(std::string scope = "net") {
  Variables vars(std::move(scope));
  vars.add("a/kernel", {2, 3});
  vars.add("a/bias", {3});
  vars.add("b/kernel", {3, 1});
  return vars;
}

// Fills the weights with 1, 2, 3, ... so every element is distinguishable.
void number(Variables& vars) {
  auto w = vars.weights();
  std::iota(w.begin(), w.end(), 1.0f);
}

}  // namespace

TEST_CASE("add returns ids that find and at look up by the full scoped name") {
  Variables vars("mlp");
  VariableId const kernel = vars.add("dense/kernel", {4, 2});
  VariableId const bias = vars.add("dense/bias", {2});
  CHECK(vars.size() == 2);
  CHECK(kernel.index == 0);
  CHECK(bias.index == 1);
  CHECK(vars[kernel].name == "mlp/dense/kernel");
  CHECK(vars[bias].name == "mlp/dense/bias");
  CHECK(vars.scope() == "mlp");

  REQUIRE(vars.find("mlp/dense/kernel").has_value());
  CHECK(*vars.find("mlp/dense/kernel") == kernel);
  CHECK(*vars.find("mlp/dense/bias") == bias);
  CHECK(vars.at("mlp/dense/kernel") == kernel);
  CHECK(vars.at("mlp/dense/bias") == bias);
  // The unscoped name is not a name of this set.
  CHECK_FALSE(vars.find("dense/kernel").has_value());
  CHECK_FALSE(vars.find("mlp/dense").has_value());
}

TEST_CASE("without a scope the name is used as given") {
  Variables vars;
  auto const id = vars.add("w", {3});
  CHECK(vars[id].name == "w");
  CHECK(vars.at("w") == id);
}

TEST_CASE("offsets are contiguous in declaration order and sizes follow the shapes") {
  Variables vars = three();
  auto const list = vars.list();
  REQUIRE(list.size() == 3);
  CHECK(list[0].name == "net/a/kernel");
  CHECK(list[1].name == "net/a/bias");
  CHECK(list[2].name == "net/b/kernel");
  CHECK(list[0].shape == Shape{2, 3});
  CHECK(list[1].shape == Shape{3});
  CHECK(list[2].shape == Shape{3, 1});
  CHECK(list[0].offset == 0);
  CHECK(list[0].size == 6);
  CHECK(list[1].offset == 6);
  CHECK(list[1].size == 3);
  CHECK(list[2].offset == 9);
  CHECK(list[2].size == 3);
  CHECK(vars.element_count() == 12);
  CHECK(vars.weights().size() == 12);
  CHECK(vars.grads().size() == 12);
}

TEST_CASE("new variables start at zero") {
  Variables vars = three();
  for (float w : vars.weights()) CHECK(w == 0.0f);
  for (float g : vars.grads()) CHECK(g == 0.0f);
}

TEST_CASE("flat weights() and grads() alias value() and grad()") {
  Variables vars = three();
  auto const bias = vars.at("net/a/bias");
  // Per-variable views point into the arenas at the variable's offset.
  CHECK(vars.value(bias).data() == vars.weights().data() + 6);
  CHECK(vars.grad(bias).data() == vars.grads().data() + 6);
  CHECK(vars.value(bias).size() == 3);
  CHECK(vars.grad(bias).size() == 3);

  // Write through the flat view, read through the variable's view, and the other way round.
  vars.weights()[7] = 42.0f;
  CHECK(vars.value(bias)[1] == 42.0f);
  vars.value(bias)[2] = -5.0f;
  CHECK(vars.weights()[8] == -5.0f);
  vars.grads()[9] = 3.5f;
  CHECK(vars.grad(vars.at("net/b/kernel"))[0] == 3.5f);
  vars.grad(vars.at("net/a/kernel"))[5] = 1.25f;
  CHECK(vars.grads()[5] == 1.25f);
  // Weights and gradients are different arenas.
  CHECK(vars.weights()[5] == 0.0f);
  CHECK(vars.grads()[7] == 0.0f);

  Variables const& cvars = vars;
  CHECK(cvars.value(bias).data() == cvars.weights().data() + 6);
  CHECK(cvars.grad(bias)[0] == 0.0f);
}

TEST_CASE("a duplicate name throws NameError naming the full duplicate name") {
  Variables vars("gen");
  vars.add("dense/kernel", {2, 2});
  auto const message = message_of<NameError>([&] { vars.add("dense/kernel", {3}); });
  CHECK(message.find("'gen/dense/kernel'") != std::string::npos);
  // Nothing was added.
  CHECK(vars.size() == 1);
  CHECK(vars.element_count() == 4);
}

TEST_CASE("at() of an unknown name throws NameError naming it") {
  Variables vars = three();
  auto const message = message_of<NameError>([&] { (void)vars.at("net/c/kernel"); });
  CHECK(message.find("'net/c/kernel'") != std::string::npos);
  CHECK(message.find("net") != std::string::npos);
}

TEST_CASE("get_flat and set_flat round trip; set_flat checks the size") {
  Variables vars = three();
  number(vars);
  std::vector<float> const flat = vars.get_flat();
  REQUIRE(flat.size() == 12);
  for (std::size_t i = 0; i < flat.size(); ++i) CHECK(flat[i] == static_cast<float>(i + 1));

  // get_flat is a copy: changing the set afterwards does not change it.
  vars.weights()[0] = 100.0f;
  CHECK(flat[0] == 1.0f);

  Variables other = three();
  other.set_flat(flat);
  CHECK(other.get_flat() == flat);
  CHECK(other.value(other.at("net/b/kernel"))[2] == 12.0f);

  std::vector<float> const short_flat(11, 7.0f);
  std::vector<float> const long_flat(13, 7.0f);
  CHECK_THROWS_AS(other.set_flat(short_flat), ShapeError);
  CHECK_THROWS_AS(other.set_flat(long_flat), ShapeError);
  auto const message = message_of<ShapeError>([&] { other.set_flat(short_flat); });
  CHECK(message.find("11") != std::string::npos);
  CHECK(message.find("12") != std::string::npos);
  // A failed set_flat changed nothing.
  CHECK(other.get_flat() == flat);
}

TEST_CASE("get_weights and set_weights round trip by name") {
  Variables vars = three();
  number(vars);
  auto const named = vars.get_weights();
  REQUIRE(named.size() == 3);
  CHECK(named.at("net/a/kernel") == Tensor{{2, 3}, {1, 2, 3, 4, 5, 6}});
  CHECK(named.at("net/a/bias") == Tensor{{3}, {7, 8, 9}});
  CHECK(named.at("net/b/kernel") == Tensor{{3, 1}, {10, 11, 12}});

  Variables other = three();
  other.set_weights(named);
  CHECK(other.get_flat() == vars.get_flat());

  // set_weights places each tensor by its name, not by the map's order.
  std::map<std::string, Tensor> changed = named;
  changed.at("net/a/bias") = Tensor{{3}, {-1, -2, -3}};
  other.set_weights(changed);
  CHECK(other.value(other.at("net/a/bias"))[0] == -1.0f);
  CHECK(other.value(other.at("net/a/bias"))[2] == -3.0f);
  CHECK(other.value(other.at("net/a/kernel"))[5] == 6.0f);
  CHECK(other.value(other.at("net/b/kernel"))[0] == 10.0f);
}

TEST_CASE(
    "set_weights reports every unknown, missing and mis-shaped name at once and changes nothing") {
  Variables vars = three();
  number(vars);
  auto const before = vars.get_flat();

  std::map<std::string, Tensor> named;
  named.emplace("net/a/kernel",
                Tensor{{3, 2}, std::vector<float>(6, 0.5f)});  // mis-shaped (same count)
  named.emplace("net/a/bias", Tensor{{3}, {0, 0, 0}});         // fine
  named.emplace("net/zzz/extra", Tensor{{1}, {9}});            // unknown
  // net/b/kernel is missing.

  auto const message = message_of<LoadError>([&] { vars.set_weights(named); });
  CHECK(message.find("net/zzz/extra") != std::string::npos);
  CHECK(message.find("net/b/kernel") != std::string::npos);
  CHECK(message.find("net/a/kernel") != std::string::npos);
  // The well-formed entry is not reported.
  CHECK(message.find("net/a/bias") == std::string::npos);
  // Nothing changed, not even the well-formed bias.
  CHECK(vars.get_flat() == before);
}

TEST_CASE("bind_weights makes two sets share one arena") {
  Variables first = three();
  Variables second = three();
  std::vector<float> shared(first.element_count(), 0.0f);
  std::iota(shared.begin(), shared.end(), 1.0f);
  first.bind_weights(shared);
  second.bind_weights(shared);

  CHECK(first.weights().data() == shared.data());
  CHECK(second.weights().data() == shared.data());
  CHECK(first.value(first.at("net/a/bias"))[0] == 7.0f);

  // Write through one, read through the other and through the arena.
  first.value(first.at("net/b/kernel"))[1] = -11.0f;
  CHECK(second.value(second.at("net/b/kernel"))[1] == -11.0f);
  CHECK(shared[10] == -11.0f);
  second.weights()[0] = 99.0f;
  CHECK(first.weights()[0] == 99.0f);
  std::vector<float> flat(12, 2.0f);
  second.set_flat(flat);
  CHECK(first.get_flat() == flat);

  // Gradients stay private to each set.
  first.grads()[0] = 5.0f;
  CHECK(second.grads()[0] == 0.0f);

  // A bound set cannot grow, and the arena must have the right size.
  CHECK_THROWS_AS(first.add("late", {1}), NameError);
  Variables third = three();
  std::vector<float> wrong(11);
  CHECK_THROWS_AS(third.bind_weights(wrong), ShapeError);
}

TEST_CASE("a copy of a bound set owns its weights") {
  Variables bound = three();
  std::vector<float> shared(bound.element_count());
  std::iota(shared.begin(), shared.end(), 1.0f);
  bound.bind_weights(shared);

  Variables copy = bound;
  CHECK(copy.weights().data() != shared.data());
  CHECK(copy.get_flat() == shared);  // same values
  copy.weights()[3] = -1.0f;
  copy.value(copy.at("net/b/kernel"))[0] = -2.0f;
  CHECK(shared[3] == 4.0f);
  CHECK(shared[9] == 10.0f);
  CHECK(bound.weights()[3] == 4.0f);

  // Copy assignment follows the same rule.
  Variables assigned = three();
  assigned = bound;
  CHECK(assigned.weights().data() != shared.data());
  assigned.weights()[0] = -3.0f;
  CHECK(shared[0] == 1.0f);
  CHECK(assigned.at("net/a/bias") == bound.at("net/a/bias"));

  // The original is still bound.
  bound.weights()[1] = 50.0f;
  CHECK(shared[1] == 50.0f);
}

TEST_CASE("arenas bound with a copy are read and written only through it") {
  // A stand-in for a device's memory: a buffer the host may touch only through the copy, which
  // counts the floats it moves and checks every range against the buffers.
  Variables vars = three();
  std::size_t const n = vars.element_count();
  for (std::size_t i = 0; i < n; ++i) vars.weights()[i] = static_cast<float>(i) + 1.0f;
  vars.grads()[2] = 7.0f;
  auto device = std::make_shared<std::vector<float>>(2 * n, -1.0f);
  std::span<float> const w(device->data(), n), g(device->data() + n, n);
  std::size_t moved = 0;
  auto const inside = [&](float const* p, std::size_t count) {
    return p >= device->data() && p + count <= device->data() + device->size();
  };
  vars.bind_arenas(w, g, device, [&](float* to, float const* from, std::size_t count) {
    CHECK((inside(to, count) || inside(from, count)));
    std::copy_n(from, count, to);
    moved += count;
  });
  CHECK(vars.arenas_on_device());
  CHECK(moved == 2 * n);  // the current values, copied in
  CHECK((*device)[4] == 5.0f);
  CHECK((*device)[n + 2] == 7.0f);

  moved = 0;
  auto const flat = vars.get_flat();
  CHECK(moved == n);
  CHECK(flat[4] == 5.0f);
  auto named = vars.get_weights();
  CHECK(named.at("net/a/bias").data[0] == 7.0f);
  named.at("net/a/bias").data[0] = -3.0f;
  moved = 0;
  vars.set_weights(named);
  CHECK(moved == n);  // one copy of the whole arena
  CHECK((*device)[6] == -3.0f);
  std::vector<float> ones(n, 1.0f);
  vars.set_flat(ones);
  CHECK((*device)[0] == 1.0f);

  // A copy owns host arenas again: it reads through the copy once per arena, then never.
  (*device)[n + 2] = 9.0f;
  moved = 0;
  Variables const copy = vars;
  CHECK(moved == 2 * n);
  CHECK_FALSE(copy.arenas_on_device());
  CHECK(copy.weights()[0] == 1.0f);
  CHECK(copy.grads()[2] == 9.0f);
  CHECK(copy.weights().data() != vars.weights().data());
}

TEST_CASE("an ordinary copy is independent") {
  Variables original = three();
  number(original);
  Variables copy = original;
  copy.weights()[0] = -7.0f;
  copy.grads()[0] = -8.0f;
  CHECK(original.weights()[0] == 1.0f);
  CHECK(original.grads()[0] == 0.0f);
  CHECK(copy.at("net/b/kernel") == original.at("net/b/kernel"));
}

TEST_CASE("rng() is deterministic by seed") {
  Variables a("x", 1234);
  Variables b("y", 1234);
  Variables c("x", 1235);
  std::vector<std::uint64_t> ra, rb, rc;
  for (int i = 0; i < 8; ++i) {
    ra.push_back(a.rng()());
    rb.push_back(b.rng()());
    rc.push_back(c.rng()());
  }
  CHECK(ra == rb);
  CHECK(ra != rc);

  // The default seed is default_seed.
  Variables d;
  std::mt19937_64 reference(Variables::default_seed);
  CHECK(d.rng()() == reference());

  // A copy continues the same stream.
  Variables e("x", 99);
  (void)e.rng()();
  Variables f = e;
  CHECK(e.rng()() == f.rng()());
}

}  // namespace test_core_variables
