// place::Sharded<Rule> and its shard maps: every rule holds every element exactly once, round robin
// follows replica_device_setter, greedy balances bytes, Partitioned cuts by whole rows, offsets
// tile each shard's arena, the placement log names everything, and bad input is refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <convoy/place/sharded.hpp>
#include <cstddef>
#include <helpers.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace test_place_sharded {

using namespace convoy;
using convoy::testing::message_of;

namespace {

// prefix + n; appended, since `"..." + std::to_string(n)` draws a false -Wrestrict from GCC 12.
std::string numbered(std::string prefix, std::size_t n) {
  prefix += std::to_string(n);
  return prefix;
}

// The 784-500-10 MLP of the Fashion-MNIST example.
Variables mlp_layout() {
  Variables v{"mlp"};
  v.add("hidden/kernel", {784, 500});
  v.add("hidden/bias", {500});
  v.add("out/kernel", {500, 10});
  v.add("out/bias", {10});
  return v;
}

// Large and small alternate, so round robin puts every large one on shard 0 of 2.
Variables alternating_layout() {
  Variables v{"alt"};
  v.add("big0", {1000, 100});
  v.add("small0", {10});
  v.add("big1", {1000, 100});
  v.add("small1", {10});
  return v;
}

// Odd cases: a scalar, an empty variable, a variable with fewer rows than most shard counts.
Variables odd_layout() {
  Variables v{"odd"};
  v.add("scalar", {});
  v.add("empty", {0, 7});
  v.add("two_rows", {2, 3000});
  v.add("column", {9000});
  v.add("cube", {5, 4, 300});
  return v;
}

// Twenty variables of random shapes, from a fixed seed.
Variables random_layout() {
  Variables v{"rand"};
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::size_t> dim(1, 300);
  for (int i = 0; i < 20; ++i) {
    Shape shape = i % 3 == 0 ? Shape{dim(gen)} : Shape{dim(gen), dim(gen)};
    v.add(numbered("v", static_cast<std::size_t>(i)), shape);
  }
  return v;
}

std::vector<Variables> layouts() {
  return {mlp_layout(), alternating_layout(), odd_layout(), random_layout()};
}

// Checks `map` against `layout` independently of ShardMap's own checks: every element is held
// once, by a piece inside the variable it names; pieces() is in arena order; each shard's pieces
// tile its arena in that order; the element counts add up.
void check_tiles(Variables const& layout, place::ShardMap const& map) {
  std::vector<int> held(layout.element_count(), 0);
  std::size_t previous_begin = 0;
  for (auto const& p : map.pieces()) {
    auto const& v = layout[layout.at(p.variable)];
    REQUIRE(p.shard < map.shards());
    CHECK(p.begin >= v.offset);
    CHECK(p.end <= v.offset + v.size);
    CHECK(p.begin >= previous_begin);
    previous_begin = p.begin;
    for (std::size_t e = p.begin; e < p.end; ++e) ++held[e];
  }
  CHECK(std::all_of(held.begin(), held.end(), [](int n) { return n == 1; }));
  for (auto const& v : layout.list()) {  // every variable has a home, even an empty one
    CHECK(std::any_of(map.pieces().begin(), map.pieces().end(),
                      [&](auto const& p) { return p.variable == v.name; }));
  }
  std::size_t total = 0;
  for (std::size_t s = 0; s < map.shards(); ++s) {
    std::size_t offset = 0, begin = 0;
    for (auto const* p : map.pieces_of(s)) {
      CHECK(p->shard == s);
      CHECK(p->offset == offset);  // the shard arena is its pieces concatenated...
      CHECK(p->begin >= begin);    // ...in arena order
      begin = p->begin;
      offset += p->size();
    }
    CHECK(map.elements_of(s) == offset);
    CHECK(map.bytes_of(s) == offset * sizeof(float));
    total += offset;
  }
  CHECK(total == layout.element_count());
}

std::string printed(place::ShardMap const& map, std::string_view rule) {
  std::ostringstream out;
  map.print(out, rule);
  return out.str();
}

// Largest shard over smallest; an empty shard counts as one byte, so the ratio stays finite.
double imbalance(place::ShardMap const& map) {
  std::size_t lo = map.bytes_of(0), hi = lo;
  for (std::size_t s = 1; s < map.shards(); ++s) {
    lo = std::min(lo, map.bytes_of(s));
    hi = std::max(hi, map.bytes_of(s));
  }
  return static_cast<double>(hi) / static_cast<double>(std::max<std::size_t>(lo, 1));
}

std::size_t shard_of(place::ShardMap const& map, std::string const& variable) {
  for (auto const& p : map.pieces()) {
    if (p.variable == variable) return p.shard;
  }
  FAIL("no piece for ", variable);
  return 0;
}

}  // namespace

TEST_CASE_TEMPLATE("every rule holds every element exactly once, on 1 to 5 shards", Rule,
                   place::RoundRobin, place::GreedyBySize, place::Partitioned) {
  for (auto const& layout : layouts()) {
    for (std::size_t shards = 1; shards <= 5; ++shards) {
      CAPTURE(layout.scope());
      CAPTURE(shards);
      auto const map = Rule{}.assign(layout, shards);
      CHECK(map.shards() == shards);
      check_tiles(layout, map);
      CHECK(map == Rule{}.assign(layout, shards));  // deterministic
    }
  }
}

TEST_CASE("Partitioned with a low threshold, which cuts nearly everything, still tiles") {
  for (auto const& layout : layouts()) {
    for (std::size_t shards = 1; shards <= 5; ++shards) {
      CAPTURE(layout.scope());
      CAPTURE(shards);
      check_tiles(layout, place::Partitioned{.min_bytes = 0}.assign(layout, shards));
      check_tiles(layout, place::Partitioned{.min_bytes = 4096}.assign(layout, shards));
    }
  }
}

TEST_CASE("RoundRobin follows replica_device_setter: variable i on shard i % shards") {
  auto const layout = random_layout();
  for (std::size_t shards = 1; shards <= 5; ++shards) {
    auto const map = place::RoundRobin{}.assign(layout, shards);
    REQUIRE(map.pieces().size() == layout.size());
    for (std::size_t i = 0; i < layout.size(); ++i) {
      auto const& p = map.pieces()[i];
      CHECK(p.variable == layout.list()[i].name);
      CHECK(p.shard == i % shards);
      CHECK(p.size() == layout.list()[i].size);
    }
  }
  auto const map = place::RoundRobin{}.assign(layout, 3);
  auto const on_1 = map.pieces_of(1);
  REQUIRE(on_1.size() == 7);  // v1, v4, ..., v19
  for (std::size_t k = 0; k < on_1.size(); ++k)
    CHECK(on_1[k]->variable == numbered("rand/v", 1 + 3 * k));
}

TEST_CASE("GreedyBySize balances bytes where round robin cannot") {
  auto const layout = alternating_layout();
  auto const round_robin = place::RoundRobin{}.assign(layout, 2);
  auto const greedy = place::GreedyBySize{}.assign(layout, 2);
  MESSAGE("round robin:\n" << printed(round_robin, "RoundRobin"));
  MESSAGE("greedy by size:\n" << printed(greedy, "GreedyBySize"));

  CHECK(shard_of(round_robin, "alt/big0") == 0);
  CHECK(shard_of(round_robin, "alt/big1") == 0);
  CHECK(imbalance(round_robin) > 1000.0);  // 400 080 bytes against 80
  CHECK(shard_of(greedy, "alt/big0") != shard_of(greedy, "alt/big1"));
  CHECK(imbalance(greedy) == doctest::Approx(1.0));
  // Largest first, then onto the lightest shard, the lowest index among equals.
  CHECK(shard_of(greedy, "alt/big0") == 0);
  CHECK(shard_of(greedy, "alt/big1") == 1);
  CHECK(shard_of(greedy, "alt/small0") == 0);
  CHECK(shard_of(greedy, "alt/small1") == 1);
}

TEST_CASE("GreedyBySize: no shard ends more than the largest variable above the lightest") {
  auto const layout = random_layout();
  std::size_t largest = 0;
  for (auto const& v : layout.list()) largest = std::max(largest, v.size);
  for (std::size_t shards = 2; shards <= 5; ++shards) {
    auto const greedy = place::GreedyBySize{}.assign(layout, shards);
    auto const round_robin = place::RoundRobin{}.assign(layout, shards);
    std::size_t lo = greedy.elements_of(0), hi = lo;
    for (std::size_t s = 1; s < shards; ++s) {
      lo = std::min(lo, greedy.elements_of(s));
      hi = std::max(hi, greedy.elements_of(s));
    }
    CAPTURE(shards);
    CHECK(hi - lo <= largest);
    CHECK(imbalance(greedy) <= imbalance(round_robin));
  }
}

TEST_CASE("GreedyBySize: equal sizes go in layout order over the shards") {
  Variables layout{"same"};
  for (int i = 0; i < 6; ++i) layout.add(numbered("v", static_cast<std::size_t>(i)), {4, 4});
  auto const map = place::GreedyBySize{}.assign(layout, 4);
  for (std::size_t i = 0; i < 6; ++i) CHECK(shard_of(map, numbered("same/v", i)) == i % 4);
}

TEST_CASE("the MLP under each rule: only Partitioned splits its one large kernel") {
  auto const layout = mlp_layout();
  auto const greedy = place::GreedyBySize{}.assign(layout, 2);
  auto const partitioned = place::Partitioned{}.assign(layout, 2);  // default: 1 MiB and up
  MESSAGE("round robin:\n" << printed(place::RoundRobin{}.assign(layout, 2), "RoundRobin"));
  MESSAGE("greedy by size:\n" << printed(greedy, "GreedyBySize"));
  MESSAGE("partitioned:\n" << printed(partitioned, "Partitioned"));
  CHECK(imbalance(greedy) > 50.0);       // 392 000 floats of kernel against 5 510: whole variables
  CHECK(imbalance(partitioned) < 1.05);  // 201 000 floats against 196 510
}

TEST_CASE("Partitioned cuts a large variable into whole rows, one part per shard") {
  Variables layout{"p"};
  layout.add("small", {100});             // 400 bytes: stays whole
  layout.add("big", {10, 1000});          // 40 000 bytes: cut
  layout.add("at_threshold", {1, 1024});  // exactly min_bytes: cut, but its one row is one part
  auto const& big = layout[layout.at("p/big")];
  auto const map = place::Partitioned{.min_bytes = 4096}.assign(layout, 3);
  check_tiles(layout, map);

  std::vector<place::Piece> parts;
  for (auto const& p : map.pieces())
    if (p.variable == "p/big") parts.push_back(p);
  REQUIRE(parts.size() == 3);
  std::vector<std::size_t> rows, shards;
  for (auto const& p : parts) {
    CHECK((p.begin - big.offset) % 1000 == 0);  // whole rows
    CHECK(p.size() % 1000 == 0);
    rows.push_back(p.size() / 1000);
    shards.push_back(p.shard);
  }
  CHECK(rows == std::vector<std::size_t>{4, 3, 3});  // differ by at most one, larger first
  CHECK(shards == std::vector<std::size_t>{0, 1, 2});
  // After big's parts the loads are 4000, 3000, 3000 floats: at_threshold's one part goes to the
  // lightest, shard 1; then the rest go greedily, small to shard 2.
  CHECK(shard_of(map, "p/at_threshold") == 1);
  CHECK(shard_of(map, "p/small") == 2);
  CHECK(std::count_if(map.pieces().begin(), map.pieces().end(),
                      [](auto const& p) { return p.variable == "p/small"; }) == 1);

  // Fewer rows than shards: one part per row, on distinct shards.
  Variables narrow{"n"};
  narrow.add("two_rows", {2, 5000});
  auto const cut = place::Partitioned{.min_bytes = 4096}.assign(narrow, 4);
  REQUIRE(cut.pieces().size() == 2);
  CHECK(cut.pieces()[0].size() == 5000);
  CHECK(cut.pieces()[1].size() == 5000);
  CHECK(cut.pieces()[0].shard != cut.pieces()[1].shard);
  CHECK(cut.elements_of(2) == 0);
  CHECK(cut.elements_of(3) == 0);
}

TEST_CASE("ShardMap takes pieces in any order, ignores their offsets and computes them") {
  auto const layout = alternating_layout();
  auto const canonical = place::GreedyBySize{}.assign(layout, 2);
  std::vector<place::Piece> pieces(canonical.pieces().begin(), canonical.pieces().end());
  std::reverse(pieces.begin(), pieces.end());
  for (auto& p : pieces) p.offset = 12345;
  place::ShardMap const rebuilt(layout, 2, pieces);
  CHECK(rebuilt == canonical);
  // Shard 0 holds big0 then small0: small0 sits right after big0 in the shard's arena.
  auto const on_0 = rebuilt.pieces_of(0);
  REQUIRE(on_0.size() == 2);
  CHECK(on_0[0]->variable == "alt/big0");
  CHECK(on_0[0]->offset == 0);
  CHECK(on_0[1]->variable == "alt/small0");
  CHECK(on_0[1]->offset == 100000);
}

TEST_CASE("print() names every variable and every shard") {
  auto const layout = mlp_layout();
  for (std::size_t shards = 1; shards <= 3; ++shards) {
    auto const partitioned = place::Partitioned{}.assign(layout, shards);
    auto const greedy = place::GreedyBySize{}.assign(layout, shards);
    for (auto const* map : {&partitioned, &greedy}) {
      auto const text = printed(*map, "Sharded<Partitioned>");
      CAPTURE(text);
      CHECK(text.find("Sharded<Partitioned>") != std::string::npos);
      for (auto const& v : layout.list())
        CHECK(text.find("convoy placement: " + v.name + " " + to_string(v.shape) + " -> ") !=
              std::string::npos);
      for (std::size_t s = 0; s < shards; ++s)
        CHECK(text.find(numbered("convoy placement: /job:ps/task:", s) + " holds ") !=
              std::string::npos);
    }
  }
  auto const two = printed(place::Partitioned{}.assign(layout, 2), "Partitioned");
  CHECK(two.find("convoy placement: mlp/hidden/kernel {784, 500} -> /job:ps/task:0 elements "
                 "[0, 196000) (rows [0, 392)), /job:ps/task:1 elements [196000, 392000) (rows "
                 "[392, 784))\n") != std::string::npos);
  CHECK(two.find("convoy placement: mlp/out/kernel {500, 10} -> /job:ps/task:") !=
        std::string::npos);
  auto const whole = printed(place::RoundRobin{}.assign(layout, 2), "RoundRobin");
  CHECK(whole.find("convoy placement: mlp/hidden/kernel {784, 500} -> /job:ps/task:0\n") !=
        std::string::npos);
  // 784*500 + 500*10 floats on task 0: 1 588 000 bytes; 510 floats on task 1.
  CHECK(whole.find("convoy placement: /job:ps/task:0 holds 1.5 MiB in 2 variables\n") !=
        std::string::npos);
  CHECK(whole.find("convoy placement: /job:ps/task:1 holds 2 KiB in 2 variables\n") !=
        std::string::npos);
}

TEST_CASE("no shards is refused") {
  auto const layout = mlp_layout();
  CHECK_THROWS_WITH_AS(place::RoundRobin{}.assign(layout, 0),
                       doctest::Contains("0 parameter-server shards"), Error);
  CHECK_THROWS_WITH_AS(place::GreedyBySize{}.assign(layout, 0),
                       doctest::Contains("0 parameter-server shards"), Error);
  CHECK_THROWS_WITH_AS(place::Partitioned{}.assign(layout, 0),
                       doctest::Contains("0 parameter-server shards"), Error);
  CHECK_THROWS_WITH_AS(place::Sharded<>{}.shard(layout, 0),
                       doctest::Contains("0 parameter-server shards"), Error);
  CHECK_THROWS_WITH_AS(place::ShardMap(layout, 0, {}),
                       doctest::Contains("at least one parameter-server shard"), Error);
  auto const map = place::GreedyBySize{}.assign(layout, 2);
  CHECK_THROWS_WITH_AS(map.pieces_of(2), doctest::Contains("shard 2 does not exist"), Error);
  CHECK_THROWS_AS(map.elements_of(7), Error);
}

TEST_CASE("a bad piece list is refused with the variable and the range") {
  Variables layout{"m"};
  layout.add("a", {10});  // elements [0, 10)
  layout.add("b", {4});   // elements [10, 14)
  layout.add("none", {0});
  auto const a = [](std::size_t begin, std::size_t end, std::size_t shard = 0) {
    return place::Piece{"m/a", shard, begin, end, 0};
  };
  place::Piece const b{"m/b", 1, 10, 14, 0};
  place::Piece const none{"m/none", 0, 14, 14, 0};
  auto const refused = [&](std::vector<place::Piece> pieces) {
    return message_of<Error>([&] { place::ShardMap(layout, 2, std::move(pieces)); });
  };

  CHECK_NOTHROW(place::ShardMap(layout, 2, {a(0, 4), a(4, 10, 1), b, none}));
  CHECK(refused({a(0, 4), a(5, 10), b, none}) ==
        "convoy: elements [4, 5) of 'm/a' are held by no shard");
  CHECK(refused({a(0, 6), a(4, 10), b, none}) == "convoy: elements [4, 6) of 'm/a' are held twice");
  CHECK(refused({a(0, 9), b, none}) == "convoy: elements [9, 10) of 'm/a' are held by no shard");
  CHECK(refused({a(0, 10, 2), b, none}) ==
        "convoy: the piece [0, 10) of 'm/a' is on shard 2, but there are only 2 shards");
  CHECK(refused({a(0, 12), b, none}).find("[0, 12) of 'm/a' is not inside the variable") !=
        std::string::npos);
  CHECK(refused({a(0, 4), a(4, 4), a(4, 10), b, none}).find("[4, 4) of 'm/a' is empty") !=
        std::string::npos);
  CHECK(refused({a(0, 10), none}) == "convoy: elements [10, 14) of 'm/b' are held by no shard");
  CHECK(refused({a(0, 10), b}).find("'m/none'") != std::string::npos);
  CHECK(refused({a(0, 10), b, none, none}).find("'m/none'") != std::string::npos);
  CHECK(refused({a(0, 10), b, none, place::Piece{"m/c", 0, 14, 20, 0}})
            .find("[14, 20) names 'm/c', which is not a variable") != std::string::npos);
}

TEST_CASE("Sharded<Rule> is a placement policy that gives contexts") {
  static_assert(placement_policy<place::Sharded<>>);
  static_assert(placement_policy<place::Sharded<place::RoundRobin>>);
  static_assert(placement_policy<place::Sharded<place::Partitioned>>);
  static_assert(gives_contexts<place::Sharded<place::RoundRobin>>);
  static_assert(gives_contexts<place::Sharded<place::Partitioned>>);
  static_assert(place::Sharded<>::name == "Sharded<GreedyBySize>");
  static_assert(place::Sharded<place::RoundRobin>::name == "Sharded<RoundRobin>");
  static_assert(place::Sharded<place::Partitioned>::name == "Sharded<Partitioned>");
  static_assert(place::Sharded<>::shared_weights);
  static_assert(std::same_as<place::Sharded<>, place::Sharded<place::GreedyBySize>>);

  place::Sharded<place::Partitioned> const policy{.rule = {.min_bytes = 4096},
                                                  .log_placement = true};
  CHECK(policy.replica_count() == 1);
  CHECK(policy.context(0) == exec::Host{});
  auto scope = policy.context(0).enter();
  auto const layout = odd_layout();
  CHECK(policy.shard(layout, 3) == place::Partitioned{.min_bytes = 4096}.assign(layout, 3));
  CHECK(policy ==
        place::Sharded<place::Partitioned>{.rule = {.min_bytes = 4096}, .log_placement = true});
  CHECK(policy != place::Sharded<place::Partitioned>{});
}

}  // namespace test_place_sharded
