// Which slices of the data ps:0 gives each worker (comm/zmq_ps/data_slices.hpp): the plan of fixed
// ranks while nothing fails, no slice trained twice or skipped when a worker is lost, comes back
// or runs ahead, several at once for a smaller group that keeps the global batch; and a shard's
// step weighs each gradient by its slices.
#include <doctest/doctest.h>

#include <convoy/comm/zmq_ps/data_slices.hpp>
#include <convoy/comm/zmq_ps/shard_state.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/sync/synchronous.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace test_comm_zmq_ps_data_slices {

using namespace convoy;
using convoy::comm::zmq_ps::DataSlices;
using Slices = std::vector<std::int64_t>;

// One slice at a time, as every worker trains unless the global batch is kept.
struct Ledger {
  DataSlices d;
  explicit Ledger(std::size_t workers) : d(workers) {}
  std::int64_t give(std::size_t w) {
    auto const& g = d.give(w);
    REQUIRE(g.size() == 1);
    return g[0];
  }
  bool may_train(std::size_t w, std::int64_t s) const { return d.may_train(w, Slices{s}); }
  void trained(std::size_t w, std::int64_t s) { d.trained(w, Slices{s}); }
  void give_back(std::size_t w) { d.give_back(w); }
  void restart(std::int64_t trained, bool roll_back) { d.restart(trained, roll_back); }
  std::int64_t held(std::size_t w) const { return d.held(w).empty() ? none : d.held(w).at(0); }
  std::int64_t frontier() const { return d.frontier(); }
  static constexpr std::int64_t none = -1;
};

TEST_CASE("nothing fails: each worker trains its own place in each global batch") {
  Ledger slices(3);
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
  Ledger slices(2);
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
  Ledger slices(2);
  slices.give(0);
  slices.give(1);
  slices.give_back(1);         // lost holding slice 1
  CHECK(slices.give(0) == 0);  // worker 0 still holds its own
  slices.trained(0, 0);
  CHECK(slices.give(0) == 1);  // then takes the lost one's
  CHECK_FALSE(slices.may_train(1, 1));
  // Back before anyone took its slice: its gradient on it counts, and the slice it was given
  // meanwhile goes to the next worker that asks.
  Ledger again(4);
  for (std::size_t w = 0; w < 4; ++w) CHECK(again.give(w) == static_cast<std::int64_t>(w));
  again.trained(1, 1);
  CHECK(again.give(1) == 5);  // its place in the next global batch
  again.give_back(0);         // lost holding 0
  again.give_back(1);         // lost holding 5
  CHECK(again.give(1) == 0);  // back: the earliest slice handed back
  REQUIRE(again.may_train(1, 5));
  again.trained(1, 5);  // the gradient it had computed before it was lost
  CHECK(again.held(1) == Ledger::none);
  CHECK_FALSE(again.may_train(1, 5));  // never twice
  CHECK(again.give(3) == 3);           // worker 3 still holds its own
  CHECK(again.give(1) == 0);           // slice 0 was handed back again, and is given first
}

TEST_CASE("a resume goes on from the trained slices; a rollback forgets what was handed out") {
  Ledger slices(2);
  slices.restart(40, false);  // a resume before training
  CHECK(slices.give(1) == 41);
  CHECK(slices.give(0) == 40);
  slices.restart(30, false);  // the same run's state set again: nothing is handed out twice
  CHECK(slices.frontier() == 42);
  CHECK(slices.give(0) == 40);
  slices.restart(30, true);
  CHECK(slices.held(0) == Ledger::none);
  CHECK(slices.give(0) == 30);
}

TEST_CASE("random losses, returns and speeds: every slice below the frontier is trained once") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::size_t const n = 2 + trial % 3;
    Ledger slices(n);
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

TEST_CASE("several slices at once: a smaller group keeps the global batch, nothing twice") {
  DataSlices slices(3);
  for (std::size_t w = 0; w < 3; ++w) slices.trained(w, slices.give(w));
  slices.give(0);
  slices.give(1);
  slices.give(2);
  slices.give_back(2);                    // lost holding slice 5
  CHECK(slices.give(0, 2) == Slices{3});  // what it holds, whatever it is asked
  slices.trained(0, Slices{3});
  CHECK(slices.give(0, 2) == Slices{5, 6});  // the lost one's first, then its own place
  CHECK(slices.held(1) == Slices{4});
  slices.trained(1, Slices{4});
  CHECK(slices.give(1) == Slices{7});
  CHECK_FALSE(slices.may_train(0, Slices{5, 5}));  // a slice twice in one push
  CHECK_FALSE(slices.may_train(0, Slices{5, 7}));  // another's
  CHECK_FALSE(slices.may_train(0, Slices{}));
  CHECK(slices.may_train(0, Slices{6, 5}));
  slices.trained(0, Slices{6, 5});
  CHECK(slices.held(0).empty());
  CHECK(slices.frontier() == 8);
}

// A shard of a 3-worker lock-step run, driven message by message with the global batch kept.
struct ShardBench {
  nn::Mlp model{{3, 2, 2}};
  place::ShardMap map = place::GreedyBySize{}.assign(model.variables(), 1);
  std::vector<place::Piece const*> pieces = map.pieces_of(0);
  comm::zmq_ps::ShardState<sync::Synchronous> state{
      pieces,
      optim::Sgd{1.0f},
      sync::Synchronous{},
      {.index = 0, .shards = 1, .workers = 3, .endpoint = {}, .log = nullptr}};
  std::map<std::uint32_t, Slices> given;  ///< what the answers gave each worker
  float weight = 0.0f;                    ///< the first weight, as the last answer carried it

  void send(comm::zmq_ps::Op op, std::uint32_t worker, float value = 0.0f, std::int64_t tag = 0) {
    comm::zmq_ps::Header h;
    h.op = op;
    h.worker = worker;
    h.tag = tag;
    h.keep_global_batch = 1;
    if (op == comm::zmq_ps::Op::push) h.slices = given.at(worker);
    std::vector<zmq::message_t> frames;
    frames.emplace_back("peer", 4);
    frames.push_back(comm::zmq_ps::encode(h));
    if (op == comm::zmq_ps::Op::push || op == comm::zmq_ps::Op::init) {
      for (auto const* p : pieces) {
        std::vector<float> v(p->size(), value);
        frames.emplace_back(v.data(), v.size() * sizeof(float));
      }
    }
    h.frames = static_cast<std::uint32_t>(frames.size() - 2);
    state.take(frames, h);
    for (auto const& a : state.answers()) {
      REQUIRE(a.header.status == comm::zmq_ps::Status::ok);
      if (!a.header.slices.empty()) given[a.header.worker] = a.header.slices;
      if (!a.payload.empty()) weight = *static_cast<float const*>(a.payload[0].data());
    }
    state.answers().clear();
  }
};

TEST_CASE("a step weighs each gradient by its slices: the global batch kept by a smaller group") {
  using comm::zmq_ps::Op;
  ShardBench b;
  b.send(Op::init, 0, 0.0f);
  for (std::uint32_t w = 0; w < 3; ++w) b.send(Op::pull, w);
  for (std::uint32_t w = 0; w < 3; ++w) b.send(Op::push, w, 1.0f, 0);
  CHECK(b.weight == doctest::Approx(-1.0f));  // SGD at rate 1: minus the mean gradient
  CHECK(b.given.at(0) == Slices{3});
  b.state.lose(2, "worker 2 lost in a test");  // it held slice 5
  b.send(Op::push, 0, 1.0f, 1);
  b.send(Op::push, 1, 4.0f, 1);
  CHECK(b.weight == doctest::Approx(-3.5f));  // (1 + 4) / 2: one slice each
  // Two live workers share a global batch of 3 slices: the first by index takes two, the lost
  // worker's first.
  CHECK(b.given.at(0) == Slices{5, 6});
  CHECK(b.given.at(1) == Slices{7});
  b.send(Op::push, 0, 1.0f, 2);
  b.send(Op::push, 1, 4.0f, 2);
  CHECK(b.weight == doctest::Approx(-5.5f));  // (2 x 1 + 4) / 3, not (1 + 4) / 2
  CHECK(b.state.counters().local_steps == std::vector<std::int64_t>{4, 3, 1});
  CHECK(b.state.counters().global_step == 3);
}

}  // namespace test_comm_zmq_ps_data_slices
