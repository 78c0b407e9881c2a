// Which slice of the data ps:0 gives each worker (comm/zmq_ps/data_slices.hpp): the plan of fixed
// ranks while nothing fails, and no slice trained twice or skipped when a worker is lost, comes
// back or runs ahead.
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps/data_slices.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace test_comm_zmq_ps_data_slices {

using convoy::comm::zmq_ps::DataSlices;

TEST_CASE("nothing fails: each worker trains its own place in each global batch") {
  DataSlices slices(3);
  for (std::int64_t step = 0; step < 4; ++step) {
    for (std::size_t w : {2u, 0u, 1u}) {  // the order the answers go out in does not matter
      auto const s = slices.give(w);
      CHECK(s == step * 3 + static_cast<std::int64_t>(w));
      CHECK(slices.give(w) == s);  // asked again (a pull, an answer sent again): the same
    }
    for (std::size_t w = 0; w < 3; ++w) {
      auto const s = slices.held(w);
      REQUIRE(slices.may_train(w, s));
      CHECK_FALSE(slices.may_train((w + 1) % 3, s));
      slices.trained(w, s);
    }
  }
  CHECK(slices.frontier() == 12);
}

TEST_CASE("a lost worker's slice goes to the next worker that asks, and the survivor skips none") {
  DataSlices slices(2);
  CHECK(slices.give(0) == 0);
  CHECK(slices.give(1) == 1);
  slices.trained(0, 0);
  slices.give_back(1);  // lost holding slice 1
  CHECK(slices.give(0) == 1);
  slices.trained(0, 1);
  // Alone, worker 0 alternates between its own place and the earliest slice nobody has.
  std::vector<std::int64_t> order;
  for (int i = 0; i < 6; ++i) {
    auto const s = slices.give(0);
    order.push_back(s);
    slices.trained(0, s);
  }
  CHECK(order == std::vector<std::int64_t>{2, 4, 3, 6, 5, 8});
}

TEST_CASE("a worker back after its slice went to another has its gradient on it refused") {
  DataSlices slices(2);
  slices.give(0);
  slices.give(1);
  slices.give_back(1);         // lost holding slice 1
  CHECK(slices.give(0) == 0);  // worker 0 still holds its own
  slices.trained(0, 0);
  CHECK(slices.give(0) == 1);  // then takes the lost one's
  CHECK_FALSE(slices.may_train(1, 1));
  // Back before anyone took its slice: its gradient on it counts, and the slice it was given
  // meanwhile goes to the next worker that asks.
  DataSlices again(4);
  for (std::size_t w = 0; w < 4; ++w) CHECK(again.give(w) == static_cast<std::int64_t>(w));
  again.trained(1, 1);
  CHECK(again.give(1) == 5);  // its place in the next global batch
  again.give_back(0);         // lost holding 0
  again.give_back(1);         // lost holding 5
  CHECK(again.give(1) == 0);  // back: the earliest slice handed back
  REQUIRE(again.may_train(1, 5));
  again.trained(1, 5);  // the gradient it had computed before it was lost
  CHECK(again.held(1) == DataSlices::none);
  CHECK_FALSE(again.may_train(1, 5));  // never twice
  CHECK(again.give(3) == 3);           // worker 3 still holds its own
  CHECK(again.give(1) == 0);           // slice 0 was handed back again, and is given first
}

TEST_CASE("a resume goes on from the trained slices; a rollback forgets what was handed out") {
  DataSlices slices(2);
  slices.restart(40, false);  // a resume before training
  CHECK(slices.give(1) == 41);
  CHECK(slices.give(0) == 40);
  slices.restart(30, false);  // the same run's state set again: nothing is handed out twice
  CHECK(slices.frontier() == 42);
  CHECK(slices.give(0) == 40);
  slices.restart(30, true);
  CHECK(slices.held(0) == DataSlices::none);
  CHECK(slices.give(0) == 30);
}

TEST_CASE("random losses, returns and speeds: every slice below the frontier is trained once") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::size_t const n = 2 + trial % 3;
    DataSlices slices(n);
    std::vector<bool> live(n, true);
    std::map<std::int64_t, int> trained;
    for (int event = 0; event < 400; ++event) {
      auto const w = static_cast<std::size_t>(rng() % n);
      if (!live[w]) {
        live[w] = rng() % 4 == 0;  // comes back now and then
        continue;
      }
      if (rng() % 10 == 0) {  // lost, holding whatever it holds
        slices.give_back(w);
        live[w] = false;
        continue;
      }
      auto const s = slices.give(w);
      REQUIRE(slices.may_train(w, s));
      slices.trained(w, s);
      ++trained[s];
    }
    for (std::size_t w = 0; w < n; ++w) slices.give_back(w);  // the run ends
    // Every slice below the frontier was handed out once; those handed back were not trained,
    // and lie in the last global batch or two (each worker at most one batch ahead).
    std::int64_t missing = 0;
    for (std::int64_t s = 0; s < slices.frontier(); ++s) {
      auto const it = trained.find(s);
      if (it == trained.end()) {
        ++missing;
        continue;
      }
      CHECK(it->second == 1);
    }
    CHECK(trained.rbegin()->first < slices.frontier() + static_cast<std::int64_t>(n));
    CHECK(missing <= static_cast<std::int64_t>(2 * n));
  }
}

}  // namespace test_comm_zmq_ps_data_slices
